"""scripts/run.sh says what it does: in an environment without nanobind it names what to install
and builds nothing."""
import os
import subprocess
import sys

import harness


def test_run_sh_without_nanobind_names_what_to_install(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    py = str(venv / "bin" / "python")
    env = dict(os.environ, PYTHON=py, BUILD_DIR=str(tmp_path / "build"))
    r = subprocess.run(["bash", os.path.join(harness.ROOT, "scripts", "run.sh")], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert (f"cclx-perf needs the Python packages nanobind numpy, which {py} cannot import; "
            f"install them with: {py} -m pip install nanobind numpy") in r.stderr, r.stderr
    assert "nothing was built" in r.stderr and "building" not in r.stderr, r.stderr
    assert not (tmp_path / "build").exists()
