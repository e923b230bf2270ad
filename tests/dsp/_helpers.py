"""One-node signal models, run through the DSP compiler, ONNX Runtime and onnx.reference."""
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from ortx.dsp import compile_nodes
from ortx.ep.compile_nodes import infer_shapes
from ortx.ep.lowering._values import numpy_dtype, static_shape
from ortx.model_io import to_ort_bytes


def one_node_model(node, feeds, constants, opset):
    inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape)
              for name, array in feeds.items()]
    initializers = [numpy_helper.from_array(np.asarray(array), name) for name, array in constants.items()]
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in node.output]
    graph = helper.make_graph([node], "signal", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run_dsp(model, feeds, num_threads=1):
    ir_model = infer_shapes(model)
    graph = ir_model.graph
    program = compile_nodes(list(graph), list(graph.inputs), list(graph.outputs), num_threads=num_threads)
    outputs = [np.zeros(static_shape(v), numpy_dtype(v)) for v in graph.outputs]
    program.run([feeds[v.name] for v in graph.inputs], outputs)
    return outputs, program


def run_ort(model, feeds):
    session = ort.InferenceSession(to_ort_bytes(model),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def run_reference(model, feeds):
    return ReferenceEvaluator(model).run(None, feeds)
