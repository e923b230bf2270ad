"""`ortx npu dump STREAM|MODEL`: disassembles a command stream, or compiles a model's NPU segments and dumps them."""
from __future__ import annotations

import argparse
import sys

from ortx.cli_args import input_shape

DESCRIPTION = """\
Disassembles an ortx NPU command stream (docs/npu.md): one line per command, after a header line with the NPU's
parameters and DRAM sizes. Given an ONNX model instead (int8 QDQ, e.g. from `ortx quantize`), compiles the nodes the
NPU runs (after OrtxEP's fusions) into one stream per segment and dumps each, with a comment line per layer.
exit status: 0 ok, 2 unreadable or corrupt input."""


def add_npu_command(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("npu", help="NPU command streams: `ortx npu dump STREAM|MODEL`",
                                   description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="npu_command", metavar="ACTION", required=True)
    dump = actions.add_parser("dump", help="disassemble a stream, or a model's NPU segments",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    dump.add_argument("path", metavar="STREAM|MODEL", help="a .npu stream file or an ONNX model")
    dump.add_argument("--input-shape", metavar="NAME:D1xD2x...", type=input_shape, action="append", default=[],
                      help="fix a model input's shape (needed for dynamic dims)")
    dump.add_argument("-o", "--output", metavar="PREFIX", help="model only: also write PREFIX.<segment>.npu")
    dump.set_defaults(handler=run_dump)
    return parser


def dump_model(path: str, shapes: dict, output_prefix: str | None = None) -> str:
    import onnx

    from ortx.ep.partition import partition
    from ortx.npu.compile import check_node, compile_nodes
    from ortx.npu.stream import decode, disassemble
    from ortx.npu.verify import prepared_graph

    model = onnx.load(path)
    for value in model.graph.input:
        if value.name not in shapes:
            dims = [dim.dim_value for dim in value.type.tensor_type.shape.dim]
            if any(dim <= 0 for dim in dims):
                raise ValueError(f"input {value.name!r} has dynamic dims; pass --input-shape {value.name}:...")
            shapes[value.name] = tuple(dims)
    graph = prepared_graph(model, shapes).graph
    claimed = {node.name: check_node(node) is None for node in graph}
    texts = []
    for index, segment in enumerate(s for s in partition(graph, claimed) if s.claimed):
        compiled = compile_nodes(segment.nodes, segment.inputs, segment.outputs)
        labels = {layer.first_command: f"{layer.node} ({layer.op_type})" for layer in compiled.layers}
        texts.append(f"; segment {index}: inputs {[v.name for v in segment.inputs]} -> outputs "
                     f"{[v.name for v in segment.outputs]}\n" + disassemble(decode(compiled.stream), labels))
        if output_prefix:
            with open(f"{output_prefix}.{index}.npu", "wb") as stream:
                stream.write(compiled.stream)
    if not texts:
        return "; no node of this model runs on the NPU (int8 QDQ models do: see ortx quantize)"
    return "\n".join(texts)


def run_dump(args, out=None) -> int:
    from ortx.npu.stream import MAGIC, NpuStreamError, decode, disassemble

    out = out or sys.stdout
    try:
        with open(args.path, "rb") as stream:
            data = stream.read()
        if data[:4] == MAGIC[:4]:
            text = disassemble(decode(data))
        else:
            text = dump_model(args.path, dict(args.input_shape), args.output)
    except (OSError, ValueError, NpuStreamError) as error:
        print(f"ortx: error: {error}", file=sys.stderr)
        return 2
    print(text, file=out)
    return 0
