"""Model presets: the specs behind ``presets/models/*.json``, and loading them back.

The JSON files are generated from ``model_preset_specs()`` (``python -m tilewright.engine.workloads.presets``), so
each model's dimensions and source are written down once, here, with the source in the spec's comment.
"""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

from pydantic import TypeAdapter
from tilewright.engine.ir.workload import BertSpec, CNNSpec, GPTSpec, LlamaSpec, MLPSpec, WorkloadSpec

MODEL_PRESETS_DIR = Path(str(files("tilewright.presets"))) / "models"  # the source tree's in an editable install
_ADAPTER: TypeAdapter[WorkloadSpec] = TypeAdapter(WorkloadSpec)

_MEGATRON = "Narayanan et al., SC'21 (arXiv 2104.04473), Table 1"
# Table 1 rows: name, heads, hidden, layers, and how the paper ran it (tp, pp, GPUs, global batch).
MEGATRON_TABLE1 = (
    ("gpt-1.7b", 24, 2304, 24, 1, 1, 32, 512),
    ("gpt-3.6b", 32, 3072, 30, 2, 1, 64, 512),
    ("gpt-7.5b", 32, 4096, 36, 4, 1, 128, 512),
    ("gpt-18.4b", 48, 6144, 40, 8, 1, 256, 1024),
    ("gpt-39.1b", 64, 8192, 48, 8, 2, 512, 1536),
    ("gpt-76.1b", 80, 10240, 60, 8, 4, 1024, 1792),
    ("gpt-145.6b", 96, 12288, 80, 8, 8, 1536, 2304),
    ("gpt-310.1b", 128, 16384, 96, 8, 16, 1920, 2160),
    ("gpt-529.6b", 128, 20480, 105, 8, 35, 2520, 2520),
    ("gpt-1008b", 160, 25600, 128, 8, 64, 3072, 3072),
)
_VGG_TABLE2_MILLIONS = {"a": 133, "b": 133, "c": 134, "d": 138, "e": 144}


def model_preset_specs() -> list[WorkloadSpec]:
    """Every model preset, in the order the studio lists them."""
    specs: list[WorkloadSpec] = []
    for name, heads, hidden, layers, tp, pp, gpus, batch in MEGATRON_TABLE1:
        specs.append(GPTSpec(
            name=name, layers=layers, hidden=hidden, heads=heads, seq_len=2048, vocab=51200,
            comment=f"{_MEGATRON}, row {name.removeprefix('gpt-')}: s 2048, V 51,200, ffn 4h; "
                    f"run there with tp {tp}, pp {pp} on {gpus} A100s, global batch {batch}.",
        ))
    specs += [
        GPTSpec(
            name="gpt3-175b", layers=96, hidden=12288, heads=96, seq_len=2048, vocab=51200,
            comment="GPT-3 175B, Brown et al. 2020 (arXiv 2005.14165), Table 2.1: 96 layers, d_model 12288, "
                    "96 heads, context 2048. Vocabulary 50,257 padded to 51,200 (Megatron-LM pads to a "
                    "multiple of 128·tp; tp 8 gives 51,200), as Narayanan et al. SC'21 count it.",
        ),
        GPTSpec(
            name="t-18b", layers=40, hidden=6144, heads=48, seq_len=2048, vocab=51200,
            comment="PALM, Fang et al. 2024 (arXiv 2406.03868; github fangjh21/PALM, dl_graph.py 'T-18B'): "
                    "40 layers, hidden 6144, 48 heads, seq 2048, ffn 4h, batch 1024. PALM models the "
                    "blocks only; vocabulary 51,200 as in the Megatron table whose 18.4 B row this is.",
        ),
        LlamaSpec(
            name="llama2-7b", layers=32, hidden=4096, heads=32, ffn=11008, vocab=32000, seq_len=4096,
            comment="Llama 2 7B, Touvron et al. 2023 (arXiv 2307.09288), Hugging Face "
                    "meta-llama/Llama-2-7b-hf config.json: untied embeddings, context 4096; "
                    "6,738,415,616 parameters.",
        ),
        LlamaSpec(
            name="llama2-70b", layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=32000,
            seq_len=4096,
            comment="Llama 2 70B, Touvron et al. 2023 (arXiv 2307.09288), Hugging Face "
                    "meta-llama/Llama-2-70b-hf config.json: grouped-query attention with 8 KV heads, untied "
                    "embeddings, context 4096; 68,976,648,192 parameters.",
        ),
        LlamaSpec(
            name="llama3.1-8b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336,
            vocab=128256, seq_len=8192,
            comment="Llama 3.1 8B (Meta, 2024), Hugging Face meta-llama/Llama-3.1-8B config.json: hidden 4096, "
                    "intermediate 14336, 32 layers, 32 heads, 8 KV heads (grouped-query attention), vocabulary "
                    "128,256, untied embeddings; 8,030,261,248 parameters. Context 8192 here (the model allows "
                    "131,072 with RoPE scaling).",
        ),
        LlamaSpec(
            name="llama3-70b", layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672,
            vocab=128256, seq_len=8192,
            comment="Llama 3 70B (Meta, 2024), Hugging Face meta-llama/Meta-Llama-3-70B config.json: hidden 8192, "
                    "intermediate 28672, 80 layers, 64 heads, 8 KV heads (grouped-query attention), vocabulary "
                    "128,256, untied embeddings, context 8192; 70,553,706,496 parameters.",
        ),
        LlamaSpec(
            name="mixtral-8x7b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336,
            vocab=32000, seq_len=4096,
            moe={"experts": 8, "top_k": 2, "expert_ffn": 14336},
            comment="Mixtral 8x7B (Mistral AI; Jiang et al. 2024, arXiv 2401.04088), Hugging Face "
                    "mistralai/Mixtral-8x7B-v0.1 config.json: hidden 4096, 32 layers, 32 heads, 8 KV heads "
                    "(grouped-query attention), vocabulary 32,000, untied embeddings; every block a mixture of "
                    "experts: 8 routed SwiGLU experts of width 14336 (intermediate_size), top-2 routing "
                    "(num_experts_per_tok), dropless, router without bias. 46,702,792,704 parameters (paper: 46.7 "
                    "B), 12,879,925,248 active per token (paper: 12.9 B). Context 4096 here (the model allows "
                    "32,768).",
        ),
        BertSpec(
            name="bert-large", layers=24, hidden=1024, heads=16, ffn=4096, seq_len=512, vocab=30522,
            comment="BERT-large, Devlin et al. 2019 (arXiv 1810.04805): 24 layers, hidden 1024, 16 heads, "
                    "seq 512, uncased WordPiece vocabulary 30,522; 335 M parameters with the masked-LM head "
                    "(no pooler/NSP head).",
        ),
    ]
    for letter, millions in _VGG_TABLE2_MILLIONS.items():
        specs.append(CNNSpec(
            name=f"vgg-{letter}", arch=f"vgg-{letter}",
            comment=f"VGG configuration {letter.upper()}, Simonyan & Zisserman, ICLR 2015 (arXiv 1409.1556), "
                    f"Table 1; ImageNet 224², 1000 classes; Table 2 gives {millions} M parameters.",
        ))
    specs += [
        CNNSpec(
            name="resnet50", arch="resnet50",
            comment="ResNet-50, He et al., CVPR 2016 (arXiv 1512.03385), Table 1, in torchvision's v1.5 form "
                    "(stride on the 3×3 convolution): 25.6 M parameters, 4.1 G multiply-accumulates at 224².",
        ),
        CNNSpec(
            name="alexnet", arch="alexnet",
            comment="AlexNet, single-tower variant of Krizhevsky 2014 (arXiv 1404.5997) as in torchvision: "
                    "224² input, 64-192-384-256-256 channels, 61.1 M parameters.",
        ),
        CNNSpec(
            name="lenet", arch="lenet", image_size=32, channels=1, classes=10,
            comment="LeNet-5, LeCun et al., Proc. IEEE 1998: 32×32×1 input, 10 classes; full C3 "
                    "connectivity and an fc output instead of RBF units: 61,706 parameters.",
        ),
        MLPSpec(
            name="mlp-mnist", layer_sizes=[784, 1024, 1024, 10],
            comment="MNIST (28×28 = 784 inputs, 10 classes) with two hidden layers of 1024 ReLU units: a "
                    "small baseline, not a published model; 1,863,690 parameters.",
        ),
    ]
    return specs


def preset_json(spec: WorkloadSpec) -> str:
    """The file text of a preset: the JSON dump with sorted keys, indent 2, newline-terminated."""
    return json.dumps(spec.model_dump(mode="json"), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def write_model_presets(directory: Path = MODEL_PRESETS_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for spec in model_preset_specs():
        path = directory / f"{spec.name}.json"
        path.write_text(preset_json(spec), encoding="utf-8")
        paths.append(path)
    return paths


def list_model_presets(directory: Path = MODEL_PRESETS_DIR) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.json"))


def load_model_preset(name_or_path: str | Path, directory: Path = MODEL_PRESETS_DIR) -> WorkloadSpec:
    """A preset by name (``"gpt-1.7b"``) or by file path."""
    path = Path(name_or_path)
    if path.suffix != ".json":
        path = directory / f"{name_or_path}.json"
    return _ADAPTER.validate_json(path.read_bytes())


if __name__ == "__main__":
    for written in write_model_presets():
        print(written)
