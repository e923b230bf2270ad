"""`ortx demo`: the PP-OCRv4 models shipped in the rapidocr-onnxruntime wheel, ORT CPU against OrtxEP."""
from __future__ import annotations

import os
import sys

from ortx.measure import compare, format_table

# model key -> (file in rapidocr_onnxruntime/models, input shape used by the PP-OCR pipeline)
PACKAGED_MODELS = {
    "det": ("ch_PP-OCRv4_det_infer.onnx", (1, 3, 640, 640)),
    "rec": ("ch_PP-OCRv4_rec_infer.onnx", (1, 3, 48, 320)),
    "cls": ("ch_ppocr_mobile_v2.0_cls_infer.onnx", (1, 3, 48, 192)),
}


def packaged_model_path(key: str) -> str:
    try:
        import rapidocr_onnxruntime
    except ImportError as error:
        raise SystemExit("ortx demo needs the PP-OCR models of the rapidocr-onnxruntime wheel: "
                         "pip install 'ortx[demo]' (or pip install rapidocr-onnxruntime)") from error
    filename, _ = PACKAGED_MODELS[key]
    return os.path.join(os.path.dirname(rapidocr_onnxruntime.__file__), "models", filename)


def main(args) -> int:
    keys = [key.strip() for key in (getattr(args, "models", None) or "det,rec,cls").split(",") if key.strip()]
    unknown = [key for key in keys if key not in PACKAGED_MODELS]
    if unknown:
        raise SystemExit(f"ortx demo: unknown model(s) {unknown}; choose from {', '.join(PACKAGED_MODELS)}")
    runs = int(getattr(args, "runs", 20))
    threads = int(getattr(args, "threads", 2))
    rows = []
    print(f"ORT CPU vs OrtxEP, {threads} threads each, median of {runs} runs interleaved in blocks after warm-up, "
          "random inputs (seed 0)", flush=True)
    for key in keys:
        path = packaged_model_path(key)
        shape = PACKAGED_MODELS[key][1]
        print(f"  {key}: compiling and measuring {os.path.basename(path)} at {'x'.join(map(str, shape))} ...",
              flush=True)
        rows.append(compare(f"{key} {'x'.join(map(str, shape))}", path, shapes={"x": shape},
                            threads=threads, runs=runs))
    print(format_table(rows))
    print("models: " + ", ".join(f"{key} = {PACKAGED_MODELS[key][0]}" for key in keys))
    sys.stdout.flush()
    return 0
