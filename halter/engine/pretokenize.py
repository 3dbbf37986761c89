"""Pre-tokenization for byte-level BPE: split text into words the way llama.cpp does, per ``tokenizer.ggml.pre``.

llama.cpp applies a list of regexes one after another; each pass splits every current chunk into its
matches and the gaps between them. The GPT-2 and Llama-3 patterns run as hand-written scanners over
Unicode categories; the others run as ordinary regexes, either on a "collapsed" text where every
non-ASCII character stands for its category (patterns using ``\\p{..}``) or on the code points with
non-ASCII whitespace replaced by a vertical tab (patterns without). This module reproduces all three
so that word boundaries, and therefore token ids, match llama.cpp's exactly.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Callable

__all__ = ["Pretokenizer", "PRE_TYPES", "char_flags"]

UNDEFINED, NUMBER, LETTER, SEPARATOR, ACCENT, PUNCT, SYMBOL, CONTROL = 1, 2, 4, 8, 16, 32, 64, 128
WHITESPACE = 256
_CATEGORY = {"N": NUMBER, "L": LETTER, "Z": SEPARATOR, "M": ACCENT, "P": PUNCT, "S": SYMBOL,
             "C": CONTROL}
# Unicode White_Space, as in llama.cpp's unicode_set_whitespace
_WHITESPACE = frozenset([*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
                         0x2028, 0x2029, 0x202F, 0x205F, 0x3000])
_FLAGS: dict[str, int] = {}


def char_flags(ch: str) -> int:
    """llama.cpp's ``unicode_cpt_flags`` for one character: a category bit plus WHITESPACE."""
    f = _FLAGS.get(ch)
    if f is None:
        cat = unicodedata.category(ch)
        f = UNDEFINED if cat == "Cn" else _CATEGORY[cat[0]]
        if ord(ch) in _WHITESPACE:
            f |= WHITESPACE
        _FLAGS[ch] = f
    return f


_GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
_LLAMA3 = ("(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
           "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
_QWEN2 = ("(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
          "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
_GPT4O = ("[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+"
          "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
          "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*"
          "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
          "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
_TEKKEN = ("[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|"
           "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|"
           "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
_BLOOM = " ?[^(\\s|.,!?…。，、।۔،)]+"
# written with escapes: several of these characters are NFC singletons (U+1F7D, U+2126, U+212A, ...)
# that an editor or a copy would silently normalise into different code points
_DEEPSEEK_LETTERS = (
    "\\s?[A-Za-z"
    "\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293\u0295-\u02AF\u0370-\u0373"
    "\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C\u038E-\u03A1"
    "\u03A3-\u03F5\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD"
    "\u1C90-\u1CBA\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D"
    "\u1F20-\u1F45\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4"
    "\u1FB6-\u1FBC\u1FBE\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC"
    "\u1FF2-\u1FF4\u1FF6-\u1FFC\u2102\u2107\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128"
    "\u212A-\u212D\u212F-\u2134\u2139\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B"
    "\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787"
    "\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A"
    "\U00010400-\U0001044F\U000104B0-\U000104D3\U000104D8-\U000104FB\U00010C80-\U00010CB2"
    "\U00010CC0-\U00010CF2\U000118A0-\U000118DF\U0001E900-\U0001E943]+")
_DEEPSEEK_PUNCT = "\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+"
_CJK = "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+"

# pre-tokenizer name -> (regexes, flags); flags: ignore_merges, add_bos, clean_spaces (default True)
_FAMILIES: list[tuple[tuple[str, ...], list[str], dict[str, bool]]] = [
    (("default",), ["[\\p{P}\\$\\+<=>\\^~\\|]+", _GPT2, "\\p{N}+", "[0-9][0-9][0-9]"], {}),
    (("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
      "jina-v5-nano"), [_LLAMA3], {"ignore_merges": True, "add_bos": True}),
    (("dbrx", "smaug-bpe"), [_LLAMA3], {}),
    (("glm4", "chatglm-bpe"), [_LLAMA3], {"no_bos": True}),
    (("deepseek-llm",), ["[\r\n]", _DEEPSEEK_LETTERS, _DEEPSEEK_PUNCT, "\\s+$", _CJK,
                         "\\p{N}+"], {"clean_spaces": False}),
    (("deepseek-coder",), ["[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", _CJK, "\\p{N}"],
     {"clean_spaces": False}),
    (("falcon",), ["[\\p{P}\\$\\+<=>\\^~\\|`]+", _GPT2, "[0-9][0-9][0-9]"], {}),
    (("starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2"), ["\\p{N}", _GPT2], {}),
    (("command-r", "smollm"), ["\\p{N}", _GPT2], {"clean_spaces": False}),
    (("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
      "mellum", "modern-bert", "mpt", "olmo", "jais", "exaone4", "jina-v1-en", "jina-v2-code",
      "roberta-bpe"), [_GPT2], {}),
    (("trillion", "granite-docling"), [_GPT2], {"clean_spaces": False}),
    (("stablelm2",), [_QWEN2], {}),
    (("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open"), [_QWEN2],
     {"clean_spaces": False}),
    (("megrez",), [_QWEN2], {}),
    (("poro-chat",), [_BLOOM], {"clean_spaces": False}),
    (("bloom", "gpt3-finnish"), [_BLOOM], {}),
    (("viking",), [_BLOOM, "\\p{N}"], {"clean_spaces": False}),
    (("tekken",), [_TEKKEN], {"ignore_merges": True, "add_bos": True, "clean_spaces": False}),
    (("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), [_GPT4O], {"clean_spaces": False}),
]
PRE_TYPES: dict[str, tuple[list[str], dict[str, bool]]] = {
    name: (regexes, flags) for names, regexes, flags in _FAMILIES for name in names}

# ---------------------------------------------------------------- regex passes (llama.cpp's std::regex path)
_UCAT = {"\\p{N}": NUMBER, "\\p{L}": LETTER, "\\p{P}": PUNCT, "\\p{M}": ACCENT, "\\p{S}": SYMBOL,
         "\\p{Lu}": LETTER, "\\p{Ll}": LETTER, "\\p{Lt}": LETTER, "\\p{Lm}": LETTER, "\\p{Lo}": LETTER}
_UCAT_CHAR = {NUMBER: "\xd1", LETTER: "\xd2", PUNCT: "\xd3", ACCENT: "\xd4", SYMBOL: "\xd5"}
_UCAT_ASCII = {NUMBER: "0-9", LETTER: "A-Za-z", PUNCT: "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}", ACCENT: "",
               SYMBOL: "\\$\\+<-\\>\\^`\\|"}
_COLLAPSED: dict[str, str] = {}


def _collapse_char(ch: str) -> str:
    c = _COLLAPSED.get(ch)
    if c is None:
        if ord(ch) < 128:
            c = ch
        else:
            f = char_flags(ch)
            c = "\x0b" if f & WHITESPACE else _UCAT_CHAR.get(f & 0xFF, "\xd0")
        _COLLAPSED[ch] = c
    return c


def _uses_categories(expr: str) -> bool:
    return any(cat in expr for cat in _UCAT)


def _collapse_regex(expr: str) -> str:
    """Rewrite ``\\p{..}`` into classes over the collapsed text (as llama.cpp's unicode_regex_split)."""
    out, inside, i = [], False, 0
    while i < len(expr):
        ch = expr[i]
        if ch == "[" and (i == 0 or expr[i - 1] != "\\"):
            inside = True
            out.append(ch)
        elif inside and ch == "]" and expr[i - 1] != "\\":
            inside = False
            out.append(ch)
        elif expr.startswith("\\p{", i) and expr.find("}", i + 3) >= 0:
            end = expr.find("}", i + 3)
            cat = _UCAT.get(expr[i:end + 1])
            if cat is None:
                raise ValueError(f"unsupported Unicode category {expr[i:end + 1]} in pre-tokenizer regex")
            body = _UCAT_CHAR[cat] + _UCAT_ASCII[cat]
            out.append(body if inside else f"[{body}]")
            i = end
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _python_regex(expr: str) -> re.Pattern[str]:
    # ECMAScript '$' (no multiline) is the end of the input only; Python's would also match before '\n'.
    expr = re.sub(r"(?<!\\)\$$", r"\\Z", expr)
    return re.compile(expr, re.ASCII)


Chunks = list[tuple[int, int]]


def _regex_pass(pattern: re.Pattern[str], view: str, chunks: Chunks) -> Chunks:
    out: Chunks = []
    for a, b in chunks:
        prev = a
        for m in pattern.finditer(view, a, b):
            s, e = m.span()
            if s > prev:
                out.append((prev, s))
            if e > s:
                out.append((s, e))
            prev = e
        if prev < b:
            out.append((prev, b))
    return out


# ---------------------------------------------------------------- hand-written scanners
_CONTRACTIONS = ("s", "t", "m", "d")


def _gpt2_pass(text: str, flags: list[int], chunks: Chunks) -> Chunks:
    """``'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+``."""
    out: Chunks = []
    for a, b in chunks:
        def f(p: int) -> int:
            return flags[p] if a <= p < b else 0
        pos = start = a
        while pos < b:
            ch = text[pos]
            if ch == "'" and pos + 1 < b:
                nxt = text[pos + 1]
                if nxt in _CONTRACTIONS:
                    pos += 2
                    out.append((start, pos)); start = pos
                    continue
                if pos + 2 < b and nxt + text[pos + 2] in ("re", "ve", "ll"):
                    pos += 3
                    out.append((start, pos)); start = pos
                    continue
            f2 = f(pos + 1) if ch == " " else flags[pos]
            for cls in (LETTER, NUMBER):
                if f2 & cls:
                    pos += ch == " "
                    while f(pos) & cls:
                        pos += 1
                    break
            else:
                if not (f2 & (WHITESPACE | LETTER | NUMBER)) and f2:
                    pos += ch == " "
                    while True:
                        g = f(pos)
                        if not g or g & (WHITESPACE | LETTER | NUMBER):
                            break
                        pos += 1
                else:
                    n_ws = 0
                    while f(pos + n_ws) & WHITESPACE:
                        n_ws += 1
                    if n_ws > 1 and pos + n_ws < b:
                        pos += n_ws - 1
                    elif n_ws > 0:
                        pos += n_ws
                    else:
                        pos += 1
            if pos > start:
                out.append((start, pos))
            start = pos
    return out


def _llama3_pass(text: str, flags: list[int], chunks: Chunks) -> Chunks:
    """The Llama-3 pattern (contractions, letters with one leading mark, 1-3 digits, ...)."""
    out: Chunks = []
    for a, b in chunks:
        def f(p: int) -> int:
            return flags[p] if a <= p < b else 0
        pos = start = a
        while pos < b:
            ch = text[pos]
            fl = flags[pos]
            if ch == "'" and pos + 1 < b:
                nxt = text[pos + 1].lower()
                if nxt in _CONTRACTIONS:
                    pos += 2
                    out.append((start, pos)); start = pos
                    continue
                if pos + 2 < b and nxt + text[pos + 2].lower() in ("re", "ve", "ll"):
                    pos += 3
                    out.append((start, pos)); start = pos
                    continue
            if ch not in "\r\n" and not fl & NUMBER and (fl & LETTER or f(pos + 1) & LETTER):
                pos += 1
                while f(pos) & LETTER:
                    pos += 1
            elif fl & NUMBER:
                ini = pos
                while f(pos) & NUMBER:
                    pos += 1
                    if pos - ini >= 3:
                        out.append((start, pos)); start = ini = pos
            else:
                f2 = f(pos + 1) if ch == " " else fl
                if not (f2 & (WHITESPACE | LETTER | NUMBER)) and fl:
                    pos += ch == " "
                    while True:
                        g = f(pos)
                        if not g or g & (WHITESPACE | LETTER | NUMBER):
                            break
                        pos += 1
                    while pos < b and text[pos] in "\r\n":
                        pos += 1
                else:
                    n_ws, last_nl = 0, 0
                    while f(pos + n_ws) & WHITESPACE:
                        if text[pos + n_ws] in "\r\n":
                            last_nl = pos + n_ws + 1
                        n_ws += 1
                    if last_nl:
                        pos = last_nl
                    elif n_ws > 1 and pos + n_ws < b:
                        pos += n_ws - 1
                    elif n_ws > 0:
                        pos += n_ws
                    else:
                        pos += 1
            if pos > start:
                out.append((start, pos))
            start = pos
    return out


_CUSTOM: dict[str, Callable[[str, list[int], Chunks], Chunks]] = {_GPT2: _gpt2_pass, _LLAMA3: _llama3_pass}


class Pretokenizer:
    """Splits text into pre-tokenizer words for one ``tokenizer.ggml.pre`` type."""

    def __init__(self, pre: str) -> None:
        if pre not in PRE_TYPES:
            raise KeyError(pre)
        self.pre = pre
        regexes, self.options = PRE_TYPES[pre]
        self._passes: list[tuple[str, object]] = []
        for expr in regexes:
            if expr in _CUSTOM:
                self._passes.append(("custom", _CUSTOM[expr]))
            elif _uses_categories(expr):
                self._passes.append(("collapsed", _python_regex(_collapse_regex(expr))))
            else:
                self._passes.append(("plain", _python_regex(expr)))

    def split(self, text: str) -> list[str]:
        """The words of ``text``, in order; their concatenation is ``text``."""
        if not text:
            return []
        chunks: Chunks = [(0, len(text))]
        flags = collapsed = plain = None
        for kind, impl in self._passes:
            if kind == "custom":
                if flags is None:
                    flags = [char_flags(c) for c in text]
                chunks = impl(text, flags, chunks)  # type: ignore[operator]
            elif kind == "collapsed":
                if collapsed is None:
                    collapsed = "".join(map(_collapse_char, text))
                chunks = _regex_pass(impl, collapsed, chunks)  # type: ignore[arg-type]
            else:
                if plain is None:
                    plain = "".join(c if ord(c) < 128 or not char_flags(c) & WHITESPACE else "\x0b"
                                    for c in text)
                chunks = _regex_pass(impl, plain, chunks)  # type: ignore[arg-type]
        return [text[a:b] for a, b in chunks]
