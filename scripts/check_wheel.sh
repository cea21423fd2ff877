#!/usr/bin/env bash
# Install dotcat as a user does, away from this repository, and use it: build the sdist and the
# wheel (`python -m build`, the wheel built from the sdist, so both carry everything), check the
# wheel holds its package data, install it into a fresh virtualenv outside the repository (the
# CPU torch first, as scripts/bootstrap.sh does, then the wheel with its `html` extra), and from
# another directory, offline, on the packaged default model (all-MiniLM-L6-v2):
# `dotcat index` a folder of .md/.txt/.html files, `dotcat search` it, search it from Python
# with the README's quick-start lines, and serve it (the page, /docs and its assets).
#
#   scripts/check_wheel.sh            (or `make check-wheel`; BUILD_PYTHON: a Python with
#                                      `build`, the dev extra's; PYTHON: the new venv's base)
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
python="${PYTHON:-python3}"
build_python="${BUILD_PYTHON:-$python}"
cpu_torch="${DOTCAT_CPU_TORCH:-2.13.0}"
work="$(mktemp -d)"
server=""
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
declared="$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)"
say() { echo "check_wheel: [$((SECONDS - start))s] $*"; }
start=$SECONDS
# A step's output goes to a log, shown when the step fails.
quiet() { "$@" >"$work/step.log" 2>&1 || { cat "$work/step.log"; return 1; }; }

say "python -m build (dotcat $declared)"
quiet "$build_python" -m build --outdir "$work/dist" "$repo"
wheel="$(ls "$work"/dist/dotcat-"$declared"-*.whl)"
say "built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB) and $(basename "$work"/dist/*.tar.gz)"
"$build_python" - "$wheel" <<'EOF'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
needed = ["dotcat/__init__.py", "dotcat/py.typed", "dotcat/serve/static/index.html",
          "dotcat/serve/static/app.js", "dotcat/serve/static/style.css"]
missing = [n for n in needed if n not in names]
stray = sorted({n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")})
stray.remove("dotcat")
entry = [n for n in names if n.endswith("entry_points.txt")]
assert not missing, f"the wheel lacks {missing}"
assert not stray, f"the wheel holds more than the package: {stray}"
assert entry, "no entry_points.txt: no `dotcat` command"
print(f"check_wheel: the wheel holds {len(names)} files, package data included")
EOF

say "a fresh virtualenv outside the repository: torch==$cpu_torch (CPU), then the wheel[html]"
"$python" -m venv "$work/venv"
# --no-compile: Python compiles what it imports, not all of torch's files at install time.
quiet "$work/venv/bin/pip" install --no-compile "torch==$cpu_torch"
say "torch installed; the wheel and its dependencies next"
quiet "$work/venv/bin/pip" install --no-compile "dotcat[html] @ file://$wheel"

# A user's folder, elsewhere; no hub, no developer cache.
user="$work/user"
mkdir -p "$user/my-docs/notes"
cd "$user"
export HF_HUB_OFFLINE=1 DOTCAT_CACHE="$work/cache" PATH="$work/venv/bin:$PATH"
unset PYTHONPATH
cat >my-docs/passwords.md <<'EOF'
# Resetting your password

Open Settings, choose Account, then Reset password. A link to choose a new password is emailed
to the address on your account; it expires after one hour.
EOF
cat >my-docs/holidays.txt <<'EOF'
Office hours and holidays. The office is closed on public holidays and between Christmas and
New Year. Support answers e-mail within one working day.
EOF
cat >my-docs/notes/coffee.html <<'EOF'
<!doctype html><html><head><title>The coffee machine</title></head><body><main>
<h1>The coffee machine</h1><p>Descale the coffee machine every month with the blue tablets
kept in the kitchen drawer, and empty the grounds container every evening.</p></main></body></html>
EOF

location="$(python -c 'import dotcat; print(dotcat.__file__)')"
case "$location" in
  "$work/venv/"*) say "dotcat $(dotcat --version | cut -d' ' -f2) imported from the virtualenv" ;;
  *) say "dotcat imported from $location, not the virtualenv"; exit 1 ;;
esac
[ "$(dotcat --version)" = "dotcat $declared" ] || { say "dotcat --version: $(dotcat --version)"; exit 1; }

say "\$ dotcat index my-docs my-index"
dotcat index my-docs my-index
say "\$ dotcat search my-index 'how do I reset my password' -k 3"
dotcat search my-index "how do I reset my password" -k 3 | tee search.txt
grep -q "passwords.md" search.txt

say "Python (the README's quick start):"
cat >quickstart.py <<'EOF'
import dotcat

pipeline = dotcat.SearchPipeline("my-index")  # hybrid: BM25 + dense, as `dotcat search`
for hit in pipeline.search("how do I reset my password", k=3):
    print(hit)
EOF
cat quickstart.py
python quickstart.py | tee python.txt
head -1 python.txt | grep -q "doc_id='passwords.md'"
python - <<'EOF'
import dotcat

built = dotcat.build_and_tune("my-docs", "py-index", show_progress=False)  # as `dotcat index`
hits = dotcat.SearchPipeline("py-index").search("descaling the coffee machine", k=1)
assert built.manifest.bm25 and hits[0].doc_id == "notes/coffee.html", (built, hits)
print(f"check_wheel: dotcat.build_and_tune: {built}; top hit {hits[0].doc_id}")
EOF

port="$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
dotcat -q serve my-index --port "$port" >serve.log 2>&1 &
server=$!
python - "$port" <<'EOF'
import re, sys, time, urllib.request

base = f"http://127.0.0.1:{sys.argv[1]}"
def get(path):
    with urllib.request.urlopen(base + path, timeout=10) as answer:
        return answer.status, answer.read().decode(errors="replace")
for _ in range(240):
    try:
        get("/healthz")
        break
    except OSError:
        time.sleep(0.5)
else:
    sys.exit(f"check_wheel: the server did not start:\n{open('serve.log').read()}")
page, docs = get("/")[1], get("/docs")[1]
assets = [a for a in re.findall(r'(?:src|href)="(/[^"]+)"', page + docs) if not a.startswith("/openapi")]
assert assets, "no local assets on the page or /docs"
for asset in assets:
    assert get(asset)[0] == 200, asset
assert "passwords.md" in get("/search?q=reset+my+password")[1]
print(f"check_wheel: dotcat serve: /, /docs, /search and {len(assets)} local assets answer")
EOF
say "ok: the wheel installs and runs outside the repository"
