"""A tiny user lowering script: a small FP module lowered with the TOSA partitioner.

Used by tests/test_cli.py to exercise ``arm-accel profile``. It prints the wall time of its
lowering call as ``LOWERING_SECONDS=<s>`` so the test can compare the profile against it.
Optional argument: the number of blocks (default 2).
"""

import sys
import time

import torch
from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
from executorch.exir import to_edge_transform_and_lower


class Block(torch.nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        y = self.fc(x).reshape(b, t, 2, d // 2).permute(0, 2, 1, 3)
        return x + torch.relu(y).permute(0, 2, 1, 3).reshape(b, t, d)


def main() -> None:
    blocks = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Block(16) for _ in range(blocks)]).eval()
    exported = torch.export.export(model, (torch.randn(1, 4, 16),))
    start = time.perf_counter()
    edge = to_edge_transform_and_lower(
        exported, partitioner=[TOSAPartitioner(TosaCompileSpec("TOSA-1.0+FP"))]
    )
    print(f"LOWERING_SECONDS={time.perf_counter() - start:.6f}")
    assert edge is not None


if __name__ == "__main__":
    main()
