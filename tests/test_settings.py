"""The settings registry (ssr_sglang.settings): one declaration per SSR_* variable, the only reader of them,
the committed reference generated from it, bad values named, unknown variables reported."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ssr_sglang import settings
from ssr_sglang.settings import SETTINGS, SSRConfigError

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ssr_sglang"
BAD = {"bool": "maybe", "int": "many", "float": "lots", "choice": "bogus", "ints": "10,x", "numbers": "0.5,x",
       "names": "bogus"}


def test_committed_reference_is_generated_from_the_registry():
    doc = (ROOT / "docs" / "configuration.md").read_text()
    assert doc == settings.markdown(), ("docs/configuration.md drifted from ssr_sglang/settings.py; regenerate: "
                                        "python -m ssr_sglang.settings --markdown > docs/configuration.md")
    for name in SETTINGS:
        assert f"`{name}`" in doc


MISSPELT = {"SSR_MAX_BACH", "SSR_ZZZ", "SSR_CHECKPOINT", "SSR_NOT_DECLARED"}  # on purpose, in tests


def _package_sources():
    return [p for p in PACKAGE.rglob("*.py") if p.name != "settings.py"]


def _all_sources():
    return _package_sources() + [p for d in ("benchmarks", "programs", "scripts", "tests")
                                 for p in (ROOT / d).rglob("*.py")]


def test_every_ssr_variable_named_anywhere_is_declared():
    """The package, the benchmarks, the programs and the tests name no SSR_* variable the registry lacks."""
    named, identifiers = set(), set()
    for path in _all_sources():
        text = path.read_text()
        named |= set(re.findall(r"[\"'](SSR_[A-Z0-9_]*[A-Z0-9])[\"']", text))
        identifiers |= set(re.findall(r"^(SSR_[A-Z0-9_]+) =", text, re.M))  # Python names in __all__, not variables
    named -= identifiers | MISSPELT
    assert {"SSR_EVERY", "SSR_CPU_EXACT_VERIFY"} <= named, "the scan misses known names: the pattern is broken"
    assert sorted(named - set(SETTINGS)) == []


def test_no_module_but_the_registry_reads_the_ssr_environment():
    reader = re.compile(r"(environ\.get|getenv|environ\[|environ\.setdefault)\(?\s*[\"']SSR_")
    offenders = [str(p.relative_to(ROOT)) for p in _package_sources() if reader.search(p.read_text())]
    assert offenders == []


def test_defaults_are_the_configs_defaults_and_unchanged():
    from ssr_sglang.srt.config import _REQUEST_KEYS, RequestConfig, ServerConfig, server_config_from_env

    assert server_config_from_env({}) == ServerConfig()
    request = RequestConfig()
    for key, (field, var) in _REQUEST_KEYS.items():
        assert SETTINGS[var].request_key == key
        assert SETTINGS[var].default == getattr(request, field), var
    declared = {s.request_key for s in SETTINGS.values() if s.request_key}
    assert declared == set(_REQUEST_KEYS)
    # the defaults before the registry (2026-12-04), pinned
    assert request == RequestConfig(enabled=True, policy="auto", checkpoints=(500,), every=None, max_drafts=None,
                                    thinking_budget=None, fractions=None, draft_max_tokens=512, use_prefix=True,
                                    use_suffix=True, context=False)
    assert ServerConfig() == ServerConfig(request, "ngram", 0.85, None, "auto", None, None, None)
    others = {n: settings.get(n, {}) for n in ("SSR_TP_CONSENSUS_EVERY", "SSR_CPU_EXACT_VERIFY", "SSR_CPU_SPEC_SAMPLING",
                                                "SSR_SGLANG_CPU_SHIM", "SSR_TEST_FAULTS", "SSR_TEST_MODEL_DIR")}
    assert others == {"SSR_TP_CONSENSUS_EVERY": 1, "SSR_CPU_EXACT_VERIFY": False, "SSR_CPU_SPEC_SAMPLING": True,
                      "SSR_SGLANG_CPU_SHIM": True, "SSR_TEST_FAULTS": frozenset(),
                      "SSR_TEST_MODEL_DIR": ".cache/test-models"}


def test_cli_prints_the_reference(capsys):
    assert settings.main(["--markdown"]) == 0
    assert capsys.readouterr().out == settings.markdown()
    assert settings.main([]) == 0 and "--markdown" in capsys.readouterr().out  # no option: the help


@pytest.mark.parametrize("name", [n for n, s in SETTINGS.items() if s.kind in BAD])
def test_a_bad_value_is_an_error_naming_the_variable(name):
    with pytest.raises(SSRConfigError, match=name):
        settings.get(name, {name: BAD[SETTINGS[name].kind]})


@pytest.mark.parametrize("name,raw", [("SSR_MAX_KV_USAGE", "1.5"), ("SSR_MAX_KV_USAGE", "nan"), ("SSR_MAX_BATCH", "0"),
                                      ("SSR_MAX_DRAFT_TOKENS", "65537"), ("SSR_TP_CONSENSUS_EVERY", "-1"),
                                      ("SSR_MAX_BATCH", "none"), ("SSR_TEST_FAULTS", "fork,bogus")])
def test_out_of_range_values_are_named(name, raw):
    with pytest.raises(SSRConfigError, match=name):
        settings.get(name, {name: raw})


def test_parsed_values():
    env = {"SSR_ENABLED": " Off", "SSR_POLICY": "FIXED", "SSR_CHECKPOINTS": "16, 48,", "SSR_EVERY": "none",
           "SSR_FRACTIONS": "0.25,1", "SSR_MAX_KV_USAGE": "0.5", "SSR_CPU_SPEC_SAMPLING": "",
           "SSR_TEST_FAULTS": "fork, step", "SSR_THINK_START": " <t> "}
    got = {name: settings.get(name, env) for name in env}
    assert got == {"SSR_ENABLED": False, "SSR_POLICY": "fixed", "SSR_CHECKPOINTS": (16, 48), "SSR_EVERY": None,
                   "SSR_FRACTIONS": (0.25, 1.0), "SSR_MAX_KV_USAGE": 0.5, "SSR_CPU_SPEC_SAMPLING": True,
                   "SSR_TEST_FAULTS": frozenset({"fork", "step"}), "SSR_THINK_START": " <t> "}
    assert settings.get("SSR_MAX_BATCH", {}) is None and settings.get("SSR_TP_CONSENSUS_EVERY", {}) == 1
    with pytest.raises(KeyError):
        settings.get("SSR_NOT_DECLARED", {})


def test_unknown_variables_are_reported_with_the_closest_name():
    warnings = []
    env = {"SSR_MAX_BACH": "4", "SSR_ZZZ": "1", "SSR_EVERY": "16", "OTHER": "x"}
    found = settings.check_environment(env, warn=lambda *a: warnings.append(a[0] % a[1:]))
    assert found == [("SSR_MAX_BACH", "SSR_MAX_BATCH"), ("SSR_ZZZ", None)]
    (msg,) = warnings
    assert "SSR_MAX_BACH (did you mean SSR_MAX_BATCH?)" in msg and "SSR_ZZZ (no close match)" in msg
    assert settings.check_environment({"SSR_EVERY": "16"}, warn=warnings.append) == [] and len(warnings) == 1


def test_server_start_up_reports_unknown_and_refuses_bad_values(monkeypatch, caplog):
    """What the launcher runs first (SSRSpecAlgo.handle_server_args): the unknown name is logged, then
    the bad value stops start-up naming its variable."""
    from ssr_sglang.srt.spec import SSRSpecAlgo

    monkeypatch.setenv("SSR_CHECKPOINT", "64")
    monkeypatch.setenv("SSR_MAX_KV_USAGE", "2")
    with caplog.at_level(logging.WARNING, logger="ssr_sglang.settings"):
        with pytest.raises(SSRConfigError, match="SSR_MAX_KV_USAGE"):
            SSRSpecAlgo.handle_server_args(None, type("Args", (), {"device": "cpu"})())
    assert "SSR_CHECKPOINT (did you mean SSR_CHECKPOINTS?)" in caplog.text


def test_registry_imports_no_engine():
    code = ("import sys, ssr_sglang.settings; heavy = {'torch', 'numpy', 'sglang'} & set(sys.modules); "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True, env={"PATH": "/usr/bin:/bin"})


def test_settings_are_frozen_declarations():
    for name, s in SETTINGS.items():
        assert s.name == name and name.startswith(settings.PREFIX) and s.group in settings.GROUPS
        assert s.kind in settings._PARSERS and s.meaning
        assert dataclasses.is_dataclass(s)
        assert (s.kind in ("choice", "names")) == bool(s.choices), name


TUNING = {n: s for n, s in SETTINGS.items() if s.group == "tuning"}


def _other_value(s):
    """A valid value of tuning setting ``s`` other than its default."""
    v = s.default * 2 if s.high is None else (s.default + s.high) / 2
    return int(v) if s.kind == "int" else float(v)


def test_tuning_constants_are_read_from_the_registry_at_import():
    """Each tuning variable, set to another valid value, becomes its module constant (a fresh interpreter:
    they are read once, at import); every tuning setting names the constant that holds it."""
    assert len(TUNING) >= 40 and all(s.constant and s.kind in ("int", "float") for s in TUNING.values())
    want = {s.constant: _other_value(s) for s in TUNING.values()}
    assert all(v != TUNING[n].default for n, v in ((n, _other_value(s)) for n, s in TUNING.items()))
    env = {"PATH": "/usr/bin:/bin", **{n: str(_other_value(s)) for n, s in TUNING.items()}}
    code = ("import importlib, json, sys\n"
            "want = json.loads(sys.argv[1])\n"
            "got = {c: getattr(importlib.import_module(c.rsplit('.', 1)[0]), c.rsplit('.', 1)[1]) for c in want}\n"
            "print(json.dumps(got))\n")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(want)], check=True, env=env, cwd=ROOT,
                         capture_output=True, text=True).stdout
    assert json.loads(out) == want


_TUNING_MODULES = sorted({s.constant.rsplit(".", 1)[0] for s in TUNING.values()})
# Module-level numbers in those modules that are not tuning constants: structural sizes and limits.
_NOT_TUNING = {"ssr_sglang.core.policy.BUCKETS"}


@pytest.mark.parametrize("module", _TUNING_MODULES)
def test_no_tuning_literal_outside_the_registry(module):
    """In the modules that hold tuning constants, no module-level name is bound to a bare number literal:
    each comes from the registry (or is a structural constant listed in _NOT_TUNING)."""
    import ast

    path = ROOT / (module.replace(".", "/") + ".py")
    bad = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Constant, ast.BinOp, ast.UnaryOp)):
            parts = list(ast.walk(node.value))
            numbers = [n for n in parts if isinstance(n, ast.Constant)]
            literal = numbers and all(isinstance(n.value, (int, float)) and not isinstance(n.value, bool)
                                      for n in numbers) and not any(isinstance(n, ast.Name) for n in parts)
            if literal:
                bad += [f"{module}.{t.id}" for t in node.targets
                        if isinstance(t, ast.Name) and f"{module}.{t.id}" not in _NOT_TUNING]
    assert bad == []
