"""The documentation's commands, paths and links are real (no server; only the slow ``--help`` runs import SGLang).

For README.md and docs/*.md:

* README.md is at most 250 lines;
* every ``python -m X`` names a module that exists (in the repository or the environment), every
  ``python path.py`` / ``bash path.sh`` a file of the repository;
* every ``--flag`` given to one of the repository's scripts or modules is a string in its source (or in a
  module or script it runs), every flag given to ``sglang.launch_server`` a field of SGLang's server arguments;
* every repository path mentioned (``benchmarks/…``, ``scripts/…``, ``ssr_sglang/…``, …) exists;
* every relative Markdown link points at a file that exists, and an ``#anchor`` into a Markdown file at one
  of its headings;
* (slow) every repository module and Python script they run prints its ``--help`` and does nothing else.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MAX_README_LINES = 250
# Separate installs the docs name but the test environment need not have.
EXTERNAL = {"sglang_router"}
PATH_ROOTS = ("benchmarks", "scripts", "programs", "tests", "ssr_sglang", "docs")
PLACEHOLDER = re.compile(r"[<>*{}…$]")


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def _in_repo(p: Path) -> bool:
    """A file of the repository itself (not of an environment inside it, such as .venv)."""
    return ROOT in p.parents and "site-packages" not in p.parts


# -- extracting commands -------------------------------------------------------------------------
def _command_lines(text: str):
    """Shell-like lines: code-block lines (continuations joined, comments dropped) and inline code spans."""
    lines, in_block, lang, buf = [], False, "", ""
    for raw in text.splitlines():
        s = raw.strip()
        if s.startswith("```"):
            in_block, lang, buf = (not in_block), s[3:].strip(), ""
            continue
        if in_block:
            if lang not in ("", "bash", "sh", "shell", "console"):
                continue
            buf += " " + s[:-1] if s.endswith("\\") else " " + s
            if not s.endswith("\\"):
                lines.append(_drop_comment(buf.strip()))
                buf = ""
        else:
            lines.extend(m.group(1) for m in re.finditer(r"`([^`\n]+)`", raw))
    return lines


def _drop_comment(line: str) -> str:
    i = line.find(" #")
    return line[:i] if i >= 0 else line


def _tokens(cmd: str):
    try:
        return shlex.split(cmd)
    except ValueError:  # an unbalanced quote in prose-like code: fall back to whitespace
        return cmd.split()


def _invocations(cmd: str):
    """(kind, target, flags) for each ``python -m X`` / ``python file.py`` / ``bash file.sh`` in ``cmd``."""
    toks = _tokens(cmd)
    out = []
    i = 0
    while i < len(toks):
        t = toks[i]
        kind = target = None
        if re.fullmatch(r"(?:.*/)?python3?", t) and i + 1 < len(toks):
            if toks[i + 1] == "-m" and i + 2 < len(toks):
                kind, target, j = "module", toks[i + 2], i + 3
            elif toks[i + 1].endswith(".py"):
                kind, target, j = "file", toks[i + 1], i + 2
        elif t == "bash" and i + 1 < len(toks) and toks[i + 1].endswith(".sh"):
            kind, target, j = "file", toks[i + 1], i + 2
        if kind is None:
            i += 1
            continue
        flags = []
        while j < len(toks) and toks[j] not in ("|", "&&", ";", "||", ">", "2>&1"):
            m = re.fullmatch(r"(--[a-z][a-z0-9-]*)(?:=.*)?", toks[j])
            if m:
                flags.append(m.group(1))
            j += 1
        out.append((kind, target, flags))
        i = j
    return out


def _all_invocations():
    seen = []
    for doc in DOCS:
        for cmd in _command_lines(doc.read_text()):
            for kind, target, flags in _invocations(cmd):
                if PLACEHOLDER.search(target):
                    continue
                seen.append((_rel(doc), kind, target, tuple(flags)))
    return seen


INVOCATIONS = _all_invocations()


# -- resolving modules without importing them ------------------------------------------------------
def _module_file(name: str):
    """The source file of module ``name`` (a package: its ``__main__.py``), or None; imports nothing
    but the top-level package's spec."""
    parts = name.split(".")
    local = ROOT / parts[0]
    if local.is_dir() or (ROOT / f"{parts[0]}.py").is_file():
        bases = [ROOT]
    else:
        spec = importlib.util.find_spec(parts[0])
        if spec is None:
            return None
        if len(parts) == 1:
            if spec.submodule_search_locations:
                main = Path(next(iter(spec.submodule_search_locations))) / "__main__.py"
                return main if main.is_file() else None
            return Path(spec.origin) if spec.origin else None
        bases = [Path(loc).parent for loc in (spec.submodule_search_locations or [])]
    for base in bases:
        path = base.joinpath(*parts)
        if path.with_suffix(".py").is_file():
            return path.with_suffix(".py")
        if (path / "__main__.py").is_file():
            return path / "__main__.py"
    return None


@lru_cache(maxsize=None)
def _sglang_server_fields() -> str:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("sglang is not installed")
    srt = Path(next(iter(spec.submodule_search_locations))) / "srt"
    files = [srt / "server_args.py", *sorted((srt / "arg_groups").rglob("*.py"))]
    return "\n".join(f.read_text(errors="replace") for f in files if f.is_file())


def _sources(path: Path) -> str:
    """A script's text plus the repository modules and scripts it runs (a shell wrapper's options are
    its target's)."""
    text = path.read_text(errors="replace")
    extra = []
    for m in re.finditer(r"-m\s+([\w.]+)", text):
        f = _module_file(m.group(1))
        if f is not None and _in_repo(f):
            extra.append(f.read_text(errors="replace"))
    for m in re.finditer(r"((?:benchmarks|scripts|programs)/[\w./-]+\.(?:py|sh))", text):
        f = ROOT / m.group(1)
        if f.is_file() and f != path:
            extra.append(f.read_text(errors="replace"))
    if path.parent.name == "benchmarks" and (path.parent / "bench_utils.py").is_file():
        extra.append((path.parent / "bench_utils.py").read_text(errors="replace"))
    return "\n".join([text, *extra])


# -- the tests ------------------------------------------------------------------------------------
def test_readme_is_short():
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines, more than {MAX_README_LINES}"


def test_docs_have_commands():
    kinds = {(k, t) for _, k, t, _ in INVOCATIONS}
    assert ("file", "scripts/demo.sh") in kinds and ("file", "scripts/test.sh") in kinds
    assert ("module", "ssr_sglang.main_job") in kinds


@pytest.mark.parametrize("doc,kind,target,flags", INVOCATIONS, ids=lambda v: v if isinstance(v, str) else None)
def test_command_exists(doc, kind, target, flags):
    if kind == "module":
        if target.split(".")[0] in EXTERNAL and importlib.util.find_spec(target.split(".")[0]) is None:
            pytest.skip(f"{target}: a separate install")
        path = _module_file(target)
        assert path is not None, f"{doc}: python -m {target}: no such module"
    else:
        path = ROOT / target
        assert path.is_file(), f"{doc}: {target}: no such file in the repository"
    if not flags:
        return
    if _in_repo(path):
        src = _sources(path)
        missing = [f for f in flags if f'"{f}"' not in src and f"'{f}'" not in src
                   and not (f == "--help" and "ArgumentParser" in src)
                   and not (f.startswith("--no-") and f'"--{f[5:]}"' in src and "BooleanOptionalAction" in src)]
        assert not missing, f"{doc}: {target} has no option {', '.join(missing)}"
    elif target == "sglang.launch_server":
        fields = _sglang_server_fields()
        missing = [f for f in flags if not re.search(rf"\b{f[2:].replace('-', '_')}\b", fields)]
        assert not missing, f"{doc}: sglang.launch_server has no option {', '.join(missing)}"


def _paths():
    pat = re.compile(r"(?<![\w./-])((?:%s)/[^\s`'\")\]|,;:#]*)" % "|".join(PATH_ROOTS))
    out = set()
    for doc in DOCS:
        for m in pat.finditer(doc.read_text()):
            p = m.group(1).rstrip(".")
            if PLACEHOLDER.search(p):
                continue
            out.add((_rel(doc), p))
    return sorted(out)


@pytest.mark.parametrize("doc,path", _paths())
def test_path_exists(doc, path):
    assert (ROOT / path).exists(), f"{doc}: {path} does not exist"


def _slug(heading: str) -> str:
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


@lru_cache(maxsize=None)
def _anchors(path: Path) -> frozenset:
    text, in_block, slugs = path.read_text(), False, []
    for line in text.splitlines():
        if line.strip().startswith("```"):
            in_block = not in_block
        elif not in_block and re.match(r"#{1,6} ", line):
            slugs.append(_slug(line.lstrip("#")))
    return frozenset(slugs)


def _links():
    out = []
    for doc in DOCS:
        for m in re.finditer(r"\]\(([^)\s]+)\)", doc.read_text()):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue
            out.append((_rel(doc), target))
    return out


@pytest.mark.parametrize("doc,target", _links())
def test_link_target_exists(doc, target):
    file_part, _, anchor = target.partition("#")
    path = (ROOT / doc).parent / file_part if file_part else ROOT / doc
    assert path.exists(), f"{doc}: link {target}: {file_part} does not exist"
    if anchor and path.suffix == ".md":
        assert anchor in _anchors(path.resolve()), f"{doc}: link {target}: no heading #{anchor} in {file_part or doc}"


def _runnable():
    """Each repository module and Python script the docs run, once (shell scripts set up or run everything)."""
    seen = {}
    for doc, kind, target, _ in INVOCATIONS:
        path = _module_file(target) if kind == "module" else ROOT / target
        if path is not None and _in_repo(path) and path.suffix == ".py":
            seen.setdefault((kind, target), doc)
    return [(doc, kind, target) for (kind, target), doc in sorted(seen.items())]


@pytest.mark.slow
@pytest.mark.parametrize("doc,kind,target", _runnable())
def test_command_prints_its_help(doc, kind, target):
    """``--help`` of every command the docs give prints its usage and returns at once: it runs nothing (no
    build, no server, no results written), so a user can read any command's options before running it."""
    import subprocess

    argv = [sys.executable, *(["-m", target] if kind == "module" else [target]), "--help"]
    before = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout
    r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "usage" in r.stdout.lower(), f"{doc}: {' '.join(argv[1:])}\n{r.stdout}{r.stderr}"
    after = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout
    assert after == before, f"{doc}: {' '.join(argv[1:])} changed the checkout"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
