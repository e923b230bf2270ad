"""Test models built in code: small stand-ins for the architectures ortx meets, with seeded random weights.

Every builder returns an onnx.ModelProto (float32, NCHW, opset 17, IR version 10 because onnx 1.23 writes IR 14
which onnxruntime 1.32 rejects) that passes onnx.checker and runs in onnxruntime. Weights are drawn from
numpy.random.default_rng(seed) with He-like scales so activations stay O(1) through deep stacks; BatchNormalization
variances are drawn in [0.5, 1.5] so they are plausible (> 0) and the BN fold is numerically tame.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 10


class GraphBuilder:
    """Accumulates nodes and initializers with unique names; `finish` wraps them into a checked model."""

    def __init__(self, name: str, seed: int):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._counter = 0

    def fresh(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}_{self._counter}"

    def constant(self, array: np.ndarray, prefix: str = "const") -> str:
        name = self.fresh(prefix)
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op_type: str, inputs: list[str], num_outputs: int = 1, **attributes) -> str | list[str]:
        name = self.fresh(op_type.lower())
        outputs = [f"{name}_out{i}" if num_outputs > 1 else f"{name}_out" for i in range(num_outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=name, **attributes))
        return outputs[0] if num_outputs == 1 else outputs

    def conv(self, x: str, in_channels: int, out_channels: int, kernel: int, *, stride: int = 1, group: int = 1,
             bias: bool = False) -> str:
        fan_in = in_channels // group * kernel * kernel
        weight = self.rng.standard_normal((out_channels, in_channels // group, kernel, kernel)).astype(np.float32)
        weight *= np.float32(np.sqrt(2.0 / fan_in))
        inputs = [x, self.constant(weight, "conv_w")]
        if bias:
            inputs.append(self.constant(self.rng.uniform(-0.1, 0.1, out_channels).astype(np.float32), "conv_b"))
        pad = kernel // 2
        return self.node("Conv", inputs, kernel_shape=[kernel, kernel], strides=[stride, stride],
                         pads=[pad, pad, pad, pad], group=group)

    def batchnorm(self, x: str, channels: int) -> str:
        scale = self.rng.uniform(0.5, 1.5, channels).astype(np.float32)
        shift = self.rng.uniform(-0.2, 0.2, channels).astype(np.float32)
        mean = self.rng.uniform(-0.2, 0.2, channels).astype(np.float32)
        var = self.rng.uniform(0.5, 1.5, channels).astype(np.float32)
        inputs = [x] + [self.constant(a, p) for a, p in
                        ((scale, "bn_scale"), (shift, "bn_shift"), (mean, "bn_mean"), (var, "bn_var"))]
        return self.node("BatchNormalization", inputs, epsilon=1e-5)

    def clip6(self, x: str) -> str:
        low = self.constant(np.array(0.0, np.float32), "clip_min")
        high = self.constant(np.array(6.0, np.float32), "clip_max")
        return self.node("Clip", [x, low, high])

    def gemm(self, x: str, in_features: int, out_features: int) -> str:
        weight = (self.rng.standard_normal((out_features, in_features)) / np.sqrt(in_features)).astype(np.float32)
        bias = self.rng.uniform(-0.1, 0.1, out_features).astype(np.float32)
        return self.node("Gemm", [x, self.constant(weight, "fc_w"), self.constant(bias, "fc_b")], transB=1)

    def linear(self, x: str, in_features: int, out_features: int) -> str:
        """MatMul + Add, the form exporters emit for nn.Linear on rank > 2 inputs."""
        weight = (self.rng.standard_normal((in_features, out_features)) / np.sqrt(in_features)).astype(np.float32)
        bias = self.rng.uniform(-0.1, 0.1, out_features).astype(np.float32)
        product = self.node("MatMul", [x, self.constant(weight, "mm_w")])
        return self.node("Add", [product, self.constant(bias, "mm_b")])

    def finish(self, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, inputs, outputs, initializer=self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="ortx-tests")
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model, full_check=True)
        return model


def _float_input(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def tiny_conv_relu(seed: int = 0) -> onnx.ModelProto:
    """X[1,3,8,8] -> Conv 3x3 (bias) -> Relu -> Y[1,4,8,8]."""
    builder = GraphBuilder("tiny_conv_relu", seed)
    builder.node("Relu", [builder.conv("X", 3, 4, 3, bias=True)])
    builder.nodes[-1].output[0] = "Y"
    return builder.finish([_float_input("X", [1, 3, 8, 8])], [_float_input("Y", [1, 4, 8, 8])])


def _basic_block(builder: GraphBuilder, x: str, in_channels: int, out_channels: int, stride: int) -> str:
    out = builder.node("Relu", [builder.batchnorm(builder.conv(x, in_channels, out_channels, 3, stride=stride),
                                                  out_channels)])
    out = builder.batchnorm(builder.conv(out, out_channels, out_channels, 3), out_channels)
    shortcut = x
    if stride != 1 or in_channels != out_channels:
        shortcut = builder.batchnorm(builder.conv(x, in_channels, out_channels, 1, stride=stride), out_channels)
    return builder.node("Relu", [builder.node("Add", [out, shortcut])])


def resnet18_style(batch: int = 1, size: int = 224, seed: int = 0) -> onnx.ModelProto:
    """ResNet-18 topology: 7x7/2 stem + BN + Relu, 3x3/2 MaxPool, 4 stages x 2 basic blocks, GAP, Flatten, Gemm."""
    builder = GraphBuilder("resnet18_style", seed)
    x = builder.node("Relu", [builder.batchnorm(builder.conv("input", 3, 64, 7, stride=2), 64)])
    x = builder.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = 64
    for stage, out_channels in enumerate((64, 128, 256, 512)):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            x = _basic_block(builder, x, channels, out_channels, stride)
            channels = out_channels
    x = builder.node("Flatten", [builder.node("GlobalAveragePool", [x])], axis=1)
    builder.gemm(x, 512, 1000)
    builder.nodes[-1].output[0] = "logits"
    return builder.finish([_float_input("input", [batch, 3, size, size])], [_float_input("logits", [batch, 1000])])


# MobileNetV2 stage table (Sandler et al. 2018, Table 2): expansion t, output channels c, repeats n, first stride s.
MOBILENETV2_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                      (6, 320, 1, 1))


def _inverted_residual(builder: GraphBuilder, x: str, in_channels: int, out_channels: int, stride: int,
                       expansion: int) -> str:
    hidden = in_channels * expansion
    out = x
    if expansion != 1:
        out = builder.clip6(builder.batchnorm(builder.conv(out, in_channels, hidden, 1), hidden))
    out = builder.clip6(builder.batchnorm(builder.conv(out, hidden, hidden, 3, stride=stride, group=hidden), hidden))
    out = builder.batchnorm(builder.conv(out, hidden, out_channels, 1), out_channels)
    if stride == 1 and in_channels == out_channels:
        out = builder.node("Add", [x, out])
    return out


def mobilenetv2_style(batch: int = 1, size: int = 224, seed: int = 0) -> onnx.ModelProto:
    """MobileNetV2 topology: 3x3/2 stem, the standard inverted-residual stage table, 1x1 to 1280, GAP, Gemm."""
    builder = GraphBuilder("mobilenetv2_style", seed)
    x = builder.clip6(builder.batchnorm(builder.conv("input", 3, 32, 3, stride=2), 32))
    channels = 32
    for expansion, out_channels, repeats, first_stride in MOBILENETV2_STAGES:
        for index in range(repeats):
            x = _inverted_residual(builder, x, channels, out_channels, first_stride if index == 0 else 1, expansion)
            channels = out_channels
    x = builder.clip6(builder.batchnorm(builder.conv(x, channels, 1280, 1), 1280))
    x = builder.node("Flatten", [builder.node("GlobalAveragePool", [x])], axis=1)
    builder.gemm(x, 1280, 1000)
    builder.nodes[-1].output[0] = "logits"
    return builder.finish([_float_input("input", [batch, 3, size, size])], [_float_input("logits", [batch, 1000])])


def lstm_classifier(seed: int = 0, *, batch: int = 2, seq: int = 12, features: int = 16, hidden: int = 32,
                    classes: int = 5) -> onnx.ModelProto:
    """X[seq, batch, features] -> MatMul/Add/Relu -> LSTM -> last step -> MatMul/Add/Relu -> MatMul/Add -> logits."""
    builder = GraphBuilder("lstm_classifier", seed)
    x = builder.node("Relu", [builder.linear("X", features, hidden)])
    scale = 1.0 / np.sqrt(hidden)
    weights = builder.rng.uniform(-scale, scale, (1, 4 * hidden, hidden)).astype(np.float32)
    recurrence = builder.rng.uniform(-scale, scale, (1, 4 * hidden, hidden)).astype(np.float32)
    bias = builder.rng.uniform(-scale, scale, (1, 8 * hidden)).astype(np.float32)
    sequence_out, _, _ = builder.node(
        "LSTM", [x, builder.constant(weights, "lstm_w"), builder.constant(recurrence, "lstm_r"),
                 builder.constant(bias, "lstm_b")], num_outputs=3, hidden_size=hidden)
    # Y is [seq, num_directions, batch, hidden]; take the last time step -> [batch, hidden].
    last = builder.node("Gather", [sequence_out, builder.constant(np.array(seq - 1, np.int64), "last_step")], axis=0)
    last = builder.node("Squeeze", [last, builder.constant(np.array([0], np.int64), "squeeze_axes")])
    x = builder.node("Relu", [builder.linear(last, hidden, hidden)])
    builder.linear(x, hidden, classes)
    builder.nodes[-1].output[0] = "logits"
    return builder.finish([_float_input("X", [seq, batch, features])], [_float_input("logits", [batch, classes])])


def _gelu_erf(builder: GraphBuilder, x: str) -> str:
    """GELU(x) = 0.5 * x * (1 + erf(x / sqrt(2))), the decomposition exporters emit before opset 20's Gelu."""
    scaled = builder.node("Div", [x, builder.constant(np.array(np.sqrt(2.0), np.float32), "sqrt2")])
    one_plus = builder.node("Add", [builder.node("Erf", [scaled]), builder.constant(np.array(1.0, np.float32), "one")])
    product = builder.node("Mul", [x, one_plus])
    return builder.node("Mul", [product, builder.constant(np.array(0.5, np.float32), "half")])


def _layer_norm(builder: GraphBuilder, x: str, dim: int) -> str:
    scale = builder.rng.uniform(0.8, 1.2, dim).astype(np.float32)
    shift = builder.rng.uniform(-0.1, 0.1, dim).astype(np.float32)
    return builder.node("LayerNormalization", [x, builder.constant(scale, "ln_scale"), builder.constant(shift, "ln_b")],
                        axis=-1, epsilon=1e-5)


def transformer_block(seq: int = 16, dim: int = 64, heads: int = 4, seed: int = 0) -> onnx.ModelProto:
    """Pre-norm encoder block on X[1, seq, dim]: LN -> MHA (MatMul/Softmax) -> Add -> LN -> MLP(GELU via Erf) -> Add."""
    assert dim % heads == 0, "dim must split evenly across heads"
    head_dim = dim // heads
    builder = GraphBuilder("transformer_block", seed)
    normed = _layer_norm(builder, "X", dim)
    split_shape = builder.constant(np.array([1, seq, heads, head_dim], np.int64), "split_shape")
    projected = {}
    for role in ("q", "k", "v"):
        value = builder.node("Reshape", [builder.linear(normed, dim, dim), split_shape])
        # q, v -> [1, heads, seq, head_dim]; k -> [1, heads, head_dim, seq] so Q @ K^T is one MatMul.
        perm = [0, 2, 3, 1] if role == "k" else [0, 2, 1, 3]
        projected[role] = builder.node("Transpose", [value], perm=perm)
    scores = builder.node("MatMul", [projected["q"], projected["k"]])
    scores = builder.node("Mul", [scores, builder.constant(np.array(1.0 / np.sqrt(head_dim), np.float32), "scale")])
    attention = builder.node("MatMul", [builder.node("Softmax", [scores], axis=-1), projected["v"]])
    merged = builder.node("Transpose", [attention], perm=[0, 2, 1, 3])
    merged = builder.node("Reshape", [merged, builder.constant(np.array([1, seq, dim], np.int64), "merge_shape")])
    x = builder.node("Add", ["X", builder.linear(merged, dim, dim)])
    hidden = _gelu_erf(builder, builder.linear(_layer_norm(builder, x, dim), dim, 4 * dim))
    builder.node("Add", [x, builder.linear(hidden, 4 * dim, dim)])
    builder.nodes[-1].output[0] = "Y"
    return builder.finish([_float_input("X", [1, seq, dim])], [_float_input("Y", [1, seq, dim])])


ALL_MODELS = {
    "tiny_conv_relu": tiny_conv_relu,
    "resnet18_style": resnet18_style,
    "mobilenetv2_style": mobilenetv2_style,
    "lstm_classifier": lstm_classifier,
    "transformer_block": transformer_block,
}


def mixed_precision_net(seed: int = 0, *, sensitive: bool = False) -> onnx.ModelProto:
    """X[1,3,12,12] -> Conv 3->8 3x3 (bias) -> Relu -> Conv 8->16 3x3/2 (bias) -> Relu -> GlobalAveragePool ->
    Flatten -> Gemm 16->40 (transB) -> Relu -> MatMul 40->10 -> Y[1,10]: one layer of each op, K = 40 for the
    MatMul so int4 blocks of 16 leave a tail. `sensitive`: conv1's output channel 0 is scaled by 1e-3 and conv2's
    weights reading it by 1e3, the same function in fp32 while conv2's int8/int4 weight scales (set by the large
    weights) and its per-tensor input scale (set by the other channels) round those products away."""
    builder = GraphBuilder("mixed_precision_net", seed)
    x = builder.node("Relu", [builder.conv("X", 3, 8, 3, bias=True)])
    x = builder.node("Relu", [builder.conv(x, 8, 16, 3, stride=2, bias=True)])
    x = builder.node("Flatten", [builder.node("GlobalAveragePool", [x])], axis=1)
    x = builder.node("Relu", [builder.gemm(x, 16, 40)])
    weight = (builder.rng.standard_normal((40, 10)) / np.sqrt(40)).astype(np.float32)
    builder.node("MatMul", [x, builder.constant(weight, "mm_w")])
    builder.nodes[-1].output[0] = "Y"
    if sensitive:
        initializers = {tensor.name: tensor for tensor in builder.initializers}
        conv1, conv2 = (node for node in builder.nodes if node.op_type == "Conv")
        for name, scale, index in ((conv1.input[1], 1e-3, np.s_[0]), (conv1.input[2], 1e-3, np.s_[0]),
                                   (conv2.input[1], 1e3, np.s_[:, 0])):
            values = numpy_helper.to_array(initializers[name]).copy()
            values[index] *= np.float32(scale)
            initializers[name].CopyFrom(numpy_helper.from_array(values, name))
    return builder.finish([_float_input("X", [1, 3, 12, 12])], [_float_input("Y", [1, 10])])


def log_mel_front_end(samples: int = 16000, n_fft: int = 512, hop: int = 160, mel_bins: int = 80) -> onnx.ModelProto:
    """STFT (HannWindow) -> |X|^2 -> MelWeightMatrix MatMul -> Log, the usual speech front end."""
    constants = [numpy_helper.from_array(np.array(value, dtype), name) for name, value, dtype in [
        ("n_fft", n_fft, np.int64), ("hop", hop, np.int64), ("mel_bins", mel_bins, np.int64),
        ("rate", 16000, np.int64), ("low", 20.0, np.float32), ("high", 7600.0, np.float32),
        ("last", [-1], np.int64), ("eps", 1e-6, np.float32)]]
    nodes = [
        helper.make_node("HannWindow", ["n_fft"], ["window"], name="window"),
        helper.make_node("STFT", ["audio", "hop", "window"], ["spectrum"], name="stft", onesided=1),
        helper.make_node("Mul", ["spectrum", "spectrum"], ["squares"], name="square"),
        helper.make_node("ReduceSum", ["squares", "last"], ["power"], name="power", keepdims=0),
        helper.make_node("MelWeightMatrix", ["mel_bins", "n_fft", "rate", "low", "high"], ["mel"], name="mel"),
        helper.make_node("MatMul", ["power", "mel"], ["mel_power"], name="project"),
        helper.make_node("Add", ["mel_power", "eps"], ["floored"], name="floor"),
        helper.make_node("Log", ["floored"], ["log_mel"], name="log"),
    ]
    graph = helper.make_graph(nodes, "log_mel", [helper.make_tensor_value_info("audio", TensorProto.FLOAT,
                                                                               [1, samples, 1])],
                              [helper.make_tensor_value_info("log_mel", TensorProto.FLOAT,
                                                             [1, (samples - n_fft) // hop + 1, mel_bins])], constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
