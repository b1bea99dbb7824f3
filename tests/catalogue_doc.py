"""Write docs/bad_inputs.md: every case of the bad-input catalogue (tests/test_bad_inputs.py)
run through the CLI, with the one line dapr answers it with.

    python tests/catalogue_doc.py          # from the repository root
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import test_bad_inputs as catalogue  # noqa: E402

from dapr.cli import main  # noqa: E402


def _message(name: str, good: Path, tmp: Path) -> str:
    os.environ["DAPR_HOME"] = str(tmp / "home")
    os.chdir(tmp)
    bad = catalogue.CASES[name](catalogue.Kit(tmp, good))
    saved = {variable: os.environ.get(variable) for variable in bad.env}
    os.environ.update(bad.env)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(bad.argv)
    finally:
        for variable, value in saved.items():
            if value is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = value
    line = err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else ""
    line = line.replace(str(tmp), "TMP").replace("`", "'").replace("|", "\\|")
    return f"exit {code}: `{line}`"


def main_() -> None:
    home = os.environ.get("DAPR_HOME")
    with tempfile.TemporaryDirectory() as root:
        root_path = Path(root)
        good_kit = catalogue.Kit(root_path / "good", root_path / "none")
        (root_path / "good").mkdir()
        os.environ["DAPR_HOME"] = str(root_path / "good-home")
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(good_kit.run(good_kit.experiment())) == 0
        good = root_path / "good" / "out"
        rows = []
        for n, name in enumerate(catalogue.CASES):
            tmp = root_path / f"case-{n}"
            tmp.mkdir()
            try:
                answer = _message(name, good, tmp)
            except BaseException as error:  # noqa: BLE001 - a skip (root writes anywhere)
                answer = f"not run here ({type(error).__name__})"
            doc = (catalogue.CASES[name].__doc__ or "").strip().splitlines()
            what = doc[0] if doc else name.replace("_", " ")
            rows.append(f"| `{name}` | {what} | {answer} |")
    os.chdir(HERE.parent)
    if home is not None:
        os.environ["DAPR_HOME"] = home
    text = (
        "# The bad-input catalogue\n\n"
        "Each case gives the `dapr` command a mistake, as `tests/test_bad_inputs.py` does; dapr "
        "stops with exit status 2 and one line naming the file, key or row and the fix, and "
        "writes no partial result. `TMP` stands for the case's working directory. Regenerate "
        "with `python tests/catalogue_doc.py`.\n\n"
        f"{len(rows)} cases.\n\n| case | mistake | dapr answers |\n|---|---|---|\n"
        + "\n".join(rows)
        + "\n"
    )
    (HERE.parent / "docs" / "bad_inputs.md").write_text(text)
    print(f"wrote docs/bad_inputs.md ({len(rows)} cases)")


if __name__ == "__main__":
    main_()
