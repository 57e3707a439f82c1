"""A tiny user script from module to .pte: export, ``TOSAQuantizer``, ``prepare_pt2e``, two
calibration batches, ``convert_pt2e``, re-export, lowering with the TOSA partitioner, the
serialized program. Used by tests/test_cli.py to check ``arm-accel profile``'s stages."""

import torch
from executorch.backends.arm.quantizer import TOSAQuantizer, get_symmetric_quantization_config
from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
from executorch.exir import to_edge_transform_and_lower
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e


def main() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3)
    ).eval()
    example = (torch.randn(1, 3, 12, 12),)
    spec = TosaCompileSpec("TOSA-1.0+INT")
    quantizer = TOSAQuantizer(spec)
    quantizer.set_global(get_symmetric_quantization_config())
    graph = torch.export.export(model, example, strict=True).module()
    prepared = prepare_pt2e(graph, quantizer)
    for _ in range(2):
        prepared(torch.randn(1, 3, 12, 12))
    converted = convert_pt2e(prepared)
    exported = torch.export.export(converted, example, strict=True)
    edge = to_edge_transform_and_lower(exported, partitioner=[TOSAPartitioner(spec)])
    assert len(edge.to_executorch().buffer) > 0


if __name__ == "__main__":
    main()
