"""The grammars ``bench/gbnf_diff.py`` compares: shipped ones, every GBNF text in halter's tests,
hand-picked edge cases, random grammars and mutations of all of these; and strings for each.

Everything is drawn from one seeded ``random.Random``, so a run is reproducible.
"""
from __future__ import annotations

import ast
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Constructs where llama.cpp's reading is easy to get wrong (line endings, escapes, limits,
#: stacked repetitions, redefinition, empty and reversed classes, left recursion ...).
EDGE_CASES = [
    'root ::= "a"\r\nb ::= "b"\r\n', 'root ::= "a" |\r\n  "b"\r\n', 'root ::= "a"\rb ::= "b"',
    'root ::= "a" # c\r\n', 'root ::= (\r\n"a"\r\n| "b")',
    'root ::= "a"+?', 'root ::= "b"*+', 'root ::= "a"{2}{3}', 'root ::= "a"??', 'root ::= "a"{1,2}*',
    'root ::= "a"{50}{50}', 'root ::= "a"{40}{50}', 'root ::= ("a"{0,10}){0,300}', 'root ::= ("a"{0,10}){0,100}',
    'root ::= "a"{2000}', 'root ::= "a"{2001}', 'root ::= "a"{0,2001}', 'root ::= "a"{3,5000} "b"',
    'root ::= "a"{0}', 'root ::= "a"{0}*', 'root ::= "a"{0,0}', 'root ::= ""*', 'root ::= []*', 'root ::= ("")*',
    'root ::= "a"\nroot ::= "b"', 'root ::= x\nx ::= "a"\nx ::= "b"', 'root ::= x\nroot ::= "a"',
    'root ::= ("x" foo)\nroot ::= "a"', 'root ::= foo ("x")\nroot ::= "a"', 'root ::= foo{0}',
    'root ::= [z-a]', 'root ::= [z-a] | "b"', 'root ::= [^z-a]', 'root ::= []', 'root ::= [^]', 'root ::= "a" [] "b"',
    'root ::= "a" [^] "b"', 'root ::= "\\U00110000"', 'root ::= "\\U00110000" | "b"', 'root ::= [\\U00110000]',
    'root ::= [a-\\U00110000]', 'root ::= [^\\U00110000]', 'root ::= "\\uD800" | "a"',
    'root ::= "\\\'"', 'root ::= "\\/"', 'root ::= "\\0"', 'root ::= [\\^]', 'root ::= [\\.]', 'root ::= "\\f"',
    'root ::= "a"{,3}', 'root ::= my_rule\nmy_rule ::= "a"', 'root ::= x-1\nx-1 ::= "a"', 'root ::= 1\n1 ::= "a"',
    'root ::= "a"{3,1}', 'root ::= "a"{ 2 , 3 }', 'root ::= "a"{2 3}', 'root ::= "a"{2,3',
    'root ::= x\nx ::= "a" x', 'root ::= "a" x | "b"\nx ::= "c" x', 'root ::= "a" root',
    'root ::= root "a" | "b"', 'root ::= x "a" | "b"\nx ::= root', 'root ::= x root | "b"\nx ::= "" | "c"',
    'root ::= "a"\n| "b"', 'root ::= "a" |\n "b"', 'root ::=\n"a"', 'root ::= "a\nb"', 'root ::= [\n]',
    'root ::= [a-]', 'root ::= [-a]', 'root ::= [a\\-z]', 'root ::= [--a]', 'root ::= [a--]', 'root ::= []]',
    'root ::= [^]]', 'root ::= ["]', 'root ::= "a" # comment "b"', 'root ::= # c\n "a"', '  root ::= "a"  ',
    'root::="a"', 'root ::= <[5]>', 'root ::= !<[5]>', 'root ::= <[ 5 ]>', 'root ::= !"a"', 'root ::= .',
    'root ::= "a"\n\n\nx ::= "b"', 'root ::= (("a")?)?', 'root ::= ((("a")*)+)?', 'root ::= "a" ("b" | "c"',
    'root ::= "a")', 'root ::= @', 'root ::= "a" ::= "b"', 'root := "a"', 'root ::= \t"a"\t', 'root ::= "a"\t\n',
    'root ::= "é😀漢" [à-ÿ] [^\\x00-\\x7F]', 'root ::= [\\x00-\\U0010FFFF]', 'root ::= [^\\x00-\\U0010FFFF] | "z"',
    'root ::= x\nx ::= y\ny ::= "a"', 'root ::= "a"\nfoo ::= bar', '# only\n', '', 'ROOT ::= "a"',
]

_ATOMS = ['"a"', '"b"', '"ab"', '""', '"\\n"', '"é"', '"😀"', '"\\x41"', '"\\u00e9"', '"\\""', '"\\\\"',
          '[ab]', '[^a]', '[a-c]', '[^\\n]', '[é-ê]', '.', '[z-a]', '[]', '[^]', '[\\-]', '[a-]', '"\\U00110000"']
_QUANT = ["*", "+", "?", "{2}", "{0,2}", "{1,}", "{0}", "{1,3}", "{,2}", "{3,1}", "{2001}", "{0,2500}", "*?", "+*"]


def _expr(rng: random.Random, names: list[str], depth: int) -> str:
    options = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        items = []
        for _ in range(rng.choice([0, 1, 1, 2, 2, 3])):
            r = rng.random()
            if r < 0.45:
                item = rng.choice(_ATOMS[:16] if rng.random() < 0.9 else _ATOMS)
            elif r < 0.75:
                item = rng.choice(names)
            elif depth < 3:
                item = "(" + _expr(rng, names, depth + 1) + ")"
            else:
                item = rng.choice(_ATOMS[:10])
            if rng.random() < 0.35:
                item += rng.choice(_QUANT[:8] if rng.random() < 0.9 else _QUANT)
            items.append(item)
        options.append(" ".join(items))
    sep = rng.choice([" | ", " | ", " |\n  "]) if depth == 0 else rng.choice([" | ", "\n | "])
    return sep.join(options)


def random_grammar(rng: random.Random) -> str:
    """A random grammar of 1-4 rules over a tiny alphabet: every repetition form, recursion,
    empty alternatives, undefined names now and then, traps (``[]``, ``[z-a]``, big counts)."""
    n = rng.randint(1, 4)
    names = ["root"] + rng.sample(["a", "b-1", "item", "x", "r2", "Ab"], n - 1)
    pool = names + (["undef"] if rng.random() < 0.05 else [])
    eol = "\r\n" if rng.random() < 0.1 else "\n"
    return "".join(f"{name} ::= {_expr(rng, pool, 0)}{eol}" for name in names)


_MUTATION_CHARS = list('"[]()|*+?{},.-^\\:=#<>! \n\r\t_a0é') + ["::=", "\\x", "\\u00", "{2}", "\r\n"]


def mutate(text: str, rng: random.Random) -> str:
    """One to three random edits (insert, delete, replace, duplicate a line)."""
    for _ in range(rng.randint(1, 3)):
        i = rng.randint(0, len(text))
        op = rng.random()
        if op < 0.35:
            text = text[:i] + rng.choice(_MUTATION_CHARS) + text[i:]
        elif op < 0.65 and text:
            text = text[:i] + text[i + 1:]
        elif op < 0.9 and text:
            text = text[:i] + rng.choice(_MUTATION_CHARS) + text[i + 1:]
        else:
            lines = text.split("\n")
            k = rng.randrange(len(lines))
            lines.insert(k, lines[k])
            text = "\n".join(lines)
    return text


def test_grammars() -> list[str]:
    """Every string constant containing '::=' in halter's tests (a grammar, or a piece of one)."""
    out = []
    for path in sorted((ROOT / "tests").glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "::=" in node.value:
                out.append(node.value)
    return list(dict.fromkeys(out))


def shipped_grammars(dirs: list[Path]) -> list[tuple[str, str]]:
    out = []
    for d in dirs:
        for path in sorted(Path(d).glob("*.gbnf")):
            out.append((path.name, path.read_text(encoding="utf-8")))
    return out


def strings_for(text: str, rules, rng: random.Random, n: int = 12) -> list[str]:
    """Strings to feed: drawn from halter's reading of the grammar (when it has one), mutated, and
    random over the grammar's own characters."""
    from halter.grammar.random_text import random_text
    alphabet = sorted({c for c in text if c.isprintable() and c not in "\\"} | {"a", "b", "\n"})
    out = [""]
    if rules is not None:
        for _ in range(n // 2):
            try:
                s = random_text(rules, "root", rng, max_depth=6, max_repeat=3)
            except (ValueError, RecursionError):
                break
            if len(s) <= 200 and "\0" not in s:
                out.append(s)
                if s:
                    i = rng.randrange(len(s) + 1)
                    out.append(s[:i] + rng.choice(alphabet) + s[i:])
    while len(out) < n:
        out.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))))
    return [s for s in dict.fromkeys(x.replace("\0", "") for x in out)
            if not any(0xD800 <= ord(c) <= 0xDFFF for c in s)]      # text, never lone surrogates
