"""The light install's dead ends: a command whose extra is not installed prints one line naming the
`pip install` that fixes it, not a traceback (a fresh interpreter whose import system hides modules)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from radixgate import _cli

HIDE = textwrap.dedent(
    """
    import sys

    class Hide:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in {hidden!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, Hide())
    from radixgate._cli import main
    sys.exit(main({argv!r}))
    """
)


def _run_hiding(hidden: set[str], argv: list[str]) -> subprocess.CompletedProcess[str]:
    code = HIDE.format(hidden=hidden, argv=argv)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "hidden, argv, command",
    [
        ({"fastapi", "uvicorn", "starlette"}, ["serve", "--help"], "radixgate serve"),
        ({"torch"}, ["bench", "offline"], "radixgate bench offline"),
    ],
)
def test_missing_extra_is_one_line_naming_the_install(hidden: set[str], argv: list[str], command: str) -> None:
    done = _run_hiding(hidden, argv)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"{command} needs the 'serve' extra (") and line.endswith("pip install 'radixgate[serve]'")
    assert "Traceback" not in done.stderr


def test_a_missing_radixgate_module_is_a_bug_and_still_raises(monkeypatch) -> None:
    monkeypatch.setitem(_cli.COMMANDS, ("broken",), ("radixgate.no_such_module", "a command whose module is gone"))
    with pytest.raises(ModuleNotFoundError):
        _cli.main(["broken"])
