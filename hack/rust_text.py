"""Rust source text with comments, string and char literals blanked out (newlines kept), for the checks
that scan Rust with regular expressions (`glob_imports.py`, `fn_length.py`): braces, `*` and `;` inside
them then do not count."""
import re

RAW_STRING = re.compile(r'b?r(#*)"')
CHAR = re.compile(r"'(?:\\(?:u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])'")


def blank(text: str) -> str:
    """`text` with comments, string and char literals replaced by spaces (newlines kept), so braces and `*`
    inside them do not count."""
    out, i, n = list(text), 0, len(text)

    def clear(a: int, b: int) -> None:
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            clear(i, j)
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            clear(i, j)
            i = j
        elif m := RAW_STRING.match(text, i):
            if i and (text[i - 1].isalnum() or text[i - 1] == "_"):
                i += 1
                continue
            end = text.find('"' + m.group(1), m.end())
            j = n if end < 0 else end + 1 + len(m.group(1))
            clear(i, j)
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            clear(i, j + 1)
            i = j + 1
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}'), else a lifetime or label.
            m = CHAR.match(text, i)
            j = m.end() if m else i + 1
            if m:
                clear(i, j)
            i = j
        else:
            i += 1
    return "".join(out)
