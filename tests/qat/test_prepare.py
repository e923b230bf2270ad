"""ortx.qat.prepare: BatchNorm folded into the Convs (float numerics kept), one shared quantizer per tensor read
by quantized modules, residual Adds read float, exclusions; calibrate and fine_tune."""
import pytest

torch = pytest.importorskip("torch")

import ortx.qat  # noqa: E402
from ortx.qat.fake_quant import ActivationQuantizer  # noqa: E402
from ortx.qat.prepare_model import QuantizedCompute  # noqa: E402
from tests.qat import _torch_models  # noqa: E402


def test_batch_norm_folded_float_numerics_kept_and_original_untouched():
    model = _torch_models.residual_net()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    prepared = ortx.qat.prepare(model)
    report = prepared.ortx_qat
    assert report.batch_norms_folded == [("stem.0", "stem.1"), ("first.0", "first.1"), ("second.0", "second.1")]
    assert not any(isinstance(module, torch.nn.BatchNorm2d) for module in prepared.modules())
    assert report.modules_quantized == ["stem.0", "first.0", "second.0", "classifier"]
    inputs = _torch_models.images(4, seed=1)
    with torch.no_grad():  # mode "observe": the float model with BatchNorm folded
        torch.testing.assert_close(prepared(inputs), model(inputs), rtol=1e-5, atol=1e-5)
    ortx.qat.calibrate(prepared, [inputs])
    ortx.qat.fine_tune(prepared, [(inputs, torch.tensor([0, 1, 2, 3]))])
    assert all(torch.equal(before[name], tensor) for name, tensor in model.state_dict().items())


def test_one_quantizer_per_tensor_and_residual_add_reads_float():
    prepared = ortx.qat.prepare(_torch_models.residual_net())
    # images, stem output (read by `first` and the Add), first's ReLU, the flattened pool: 4 tensors, 4 modules
    assert prepared.ortx_qat.activation_quantizers == ["images_quantizer", "stem_2_quantizer", "first_2_quantizer",
                                                       "flatten_quantizer"]
    quantizer_nodes = {node for node in prepared.graph.nodes
                       if node.op == "call_module" and node.target.endswith("_quantizer")}
    add = next(node for node in prepared.graph.nodes if node.op == "call_function" and "add" in str(node.target))
    assert not quantizer_nodes & set(add.all_input_nodes)
    fan_out = ortx.qat.prepare(_torch_models.fan_out_concat_net())
    # `images` feeds two Convs through one quantizer; `left` (ReLU) and the Concat get their own
    assert fan_out.ortx_qat.activation_quantizers == ["images_quantizer", "cat_quantizer", "relu_quantizer"]
    assert sum(isinstance(module, ActivationQuantizer) for module in fan_out.modules()) == 3


def test_exclusion_keeps_the_module_float():
    prepared = ortx.qat.prepare(_torch_models.residual_net(), exclude=["classifier"])
    assert isinstance(prepared.classifier, torch.nn.Linear)
    assert isinstance(prepared.get_submodule("stem.0"), QuantizedCompute)
    assert prepared.ortx_qat.excluded == ["classifier"]
    with pytest.raises(ValueError, match="'head' are not Conv/Linear modules"):
        ortx.qat.prepare(_torch_models.residual_net(), exclude=["head"])


def test_untraceable_model_is_a_clear_error():
    class Branchy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 3, 1)

        def forward(self, images):
            return self.conv(images) if images.sum() > 0 else images

    with pytest.raises(ValueError, match="traces the model with torch.fx, which failed"):
        ortx.qat.prepare(Branchy())


@pytest.mark.parametrize("option, value, message", [("activation_dtype", "int4", "'int8' or 'uint8'"),
                                                    ("scales", "trained", "observed, learned")])
def test_bad_options(option, value, message):
    with pytest.raises(ValueError, match=message):
        ortx.qat.prepare(_torch_models.residual_net(), **{option: value})


def test_calibrate_and_fine_tune_errors():
    prepared = ortx.qat.prepare(_torch_models.residual_net())
    inputs, targets = _torch_models.images(4, seed=1), torch.tensor([0, 1, 2, 3])
    with pytest.raises(ValueError, match="run ortx.qat.calibrate before fine_tune"):
        ortx.qat.fine_tune(prepared, [(inputs, targets)])
    with pytest.raises(RuntimeError, match="is not calibrated"):
        ortx.qat.set_mode(prepared, "quantize")
        prepared(inputs)
    with pytest.raises(ValueError, match="calibration got no batches"):
        ortx.qat.calibrate(prepared, [])
    ortx.qat.calibrate(prepared, [inputs])
    with pytest.raises(ValueError, match="one-shot iterator"):
        ortx.qat.fine_tune(prepared, iter([(inputs, targets)]), epochs=2)
    with pytest.raises(ValueError, match="pass it through ortx.qat.prepare"):
        ortx.qat.calibrate(_torch_models.residual_net(), [inputs])


@pytest.mark.parametrize("scales", ["observed", "learned"])
def test_fine_tune_trains_weights_and_only_learned_scales(scales):
    prepared = ortx.qat.prepare(_torch_models.residual_net(), scales=scales)
    inputs = _torch_models.images(16, seed=1)
    targets = torch.arange(16) % 4
    records = ortx.qat.calibrate(prepared, [inputs[:8], inputs[8:]])
    weight = prepared.get_submodule("stem.0").module.weight.detach().clone()
    report = ortx.qat.fine_tune(prepared, [(inputs, targets)], epochs=20, learning_rate=1e-2)
    assert report.steps == 20 and len(report.epoch_losses) == 20
    assert report.epoch_losses[-1] < 0.5 * report.epoch_losses[0]  # the fake-quantized model learns
    assert not torch.equal(weight, prepared.get_submodule("stem.0").module.weight)
    scales_after = [float(quantizer.scale.detach()) for quantizer in prepared.modules()
                    if isinstance(quantizer, ActivationQuantizer)]
    changed = [after != record.scale for after, record in zip(scales_after, records)]
    assert all(changed) if scales == "learned" else not any(changed)


def test_fine_tune_with_validation_keeps_the_best_epoch():
    prepared = ortx.qat.prepare(_torch_models.residual_net())
    inputs = _torch_models.images(16, seed=1)
    ortx.qat.calibrate(prepared, [inputs])
    ortx.qat.set_mode(prepared, "quantize")
    with torch.no_grad():
        start_predictions = prepared(inputs).argmax(1)
    start_state = {name: tensor.clone() for name, tensor in prepared.state_dict().items()}
    # validation labels are the calibrated model's own predictions (top-1 1.0 before training); training on other
    # labels at a high rate can only lose that, so the calibrated weights are the ones kept
    wrong = (start_predictions + 1) % 4
    report = ortx.qat.fine_tune(prepared, [(inputs, wrong)], epochs=4, learning_rate=5e-2,
                                validation=[(inputs, start_predictions)])
    assert len(report.validation) == 5 and report.validation[0][0] == 1.0
    assert min(top1 for top1, _ in report.validation[1:]) < 1.0
    assert report.kept_epoch == 0
    assert all(torch.equal(start_state[name], tensor) for name, tensor in prepared.state_dict().items())
    # validating on the training labels: the kept epoch is the best scored one, and it is a trained one
    targets = torch.arange(16) % 4
    report = ortx.qat.fine_tune(prepared, [(inputs, targets)], epochs=6, learning_rate=1e-2,
                                validation=[(inputs, targets)])
    best = max(range(len(report.validation)), key=lambda epoch: (report.validation[epoch][0],
                                                                 -report.validation[epoch][1]))
    assert report.kept_epoch == best > 0
    with torch.no_grad():
        assert float((prepared(inputs).argmax(1) == targets).float().mean()) == report.validation[best][0]
    with pytest.raises(ValueError, match="validation is a one-shot iterator"):
        ortx.qat.fine_tune(prepared, [(inputs, targets)], validation=iter([(inputs, targets)]))
