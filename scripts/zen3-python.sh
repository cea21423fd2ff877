#!/usr/bin/env bash
# Put VENV/bin/python-zen3 beside VENV/bin/python: the same interpreter, run by qemu-x86_64 as
# an AMD Zen 3 (EPYC-Milan: AVX2 and FMA, no AVX-512, no VNNI, no native bf16).
#
#   scripts/zen3-python.sh [VENV]        (default: .venv)
#
# On an AVX-512 machine this is how the suite sees what an AVX2-only CPU gives: CPUID says
# AVX2, so FAISS, PyTorch (oneDNN, MKL), ONNX Runtime, OpenVINO and NumPy pick their AVX2
# kernels, and dotcat's own detection (models/runtime.py reads CPUID) chooses as on a Zen 3.
# Child processes started with sys.executable (servers, workers, CLI runs) are emulated too:
# argv[0] is the wrapper. About 5-10x slower than native. Needs qemu-user (Debian: apt-get
# install qemu-user, QEMU >= 7.2 for AVX2 under TCG).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv}"
if ! command -v qemu-x86_64 >/dev/null 2>&1; then
  echo "zen3-python: qemu-x86_64 not found (Debian: apt-get install qemu-user)" >&2
  exit 2
fi
# EPYC-Milan less the features TCG does not emulate (each would print a warning on every start,
# into the stderr that tests read).
missing="pcid invpcid rdseed sha-ni rdpid fsrm fxsr-opt misalignsse 3dnowprefetch osvw topoext
perfctr-core clzero xsaveerptr wbnoinvd ibpb ibrs amd-stibp amd-ssbd nrip-save xsavec xsaves"
cpu="EPYC-Milan$(printf ',-%s' $missing)"
cat > "$venv/bin/python-zen3" <<SH
#!/bin/sh
exec qemu-x86_64 -cpu $cpu -0 "\$0" "\$(dirname "\$0")/python" "\$@"
SH
chmod +x "$venv/bin/python-zen3"
"$venv/bin/python-zen3" -c "import torch; c = torch.backends.cpu.get_cpu_capability(); assert c == 'AVX2', c; print('zen3-python: $venv/bin/python-zen3 runs with', c)"
