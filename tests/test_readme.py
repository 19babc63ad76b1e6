"""The README's Python quickstart, run verbatim, prints exactly the output the README shows."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def quickstart(text: str) -> tuple[str, str]:
    """(code, output) of the README's Quickstart: its ```python block and the ```text block
    that follows it."""
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    m = re.search(r"```python\n(.*?)```.*?```text\n(.*?)```", section, re.S)
    if not m:
        raise ValueError("README: the Quickstart has no ```python block followed by a ```text one")
    return m.group(1), m.group(2)


def test_quickstart_blocks_are_found():
    code, out = quickstart("# x\n## Quickstart\n```bash\nls\n```\n```python\nprint(1)\n```\n"
                           "prints\n```text\n1\n```\n## Next\n```text\n2\n```\n")
    assert (code, out) == ("print(1)\n", "1\n")
    with pytest.raises(ValueError, match="no ```python block"):
        quickstart("## Quickstart\n```python\nprint(1)\n```\n## Next\n```text\n1\n```\n")


@pytest.mark.slow
def test_readme_quickstart_prints_what_the_readme_says(tmp_path):
    code, expected = quickstart((ROOT / "README.md").read_text(encoding="utf-8"))
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == expected
