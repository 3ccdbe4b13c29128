#!/usr/bin/env python3
"""Writes data/fortune_chat/train.jsonl: a small chat set for the SFT example
(configs/llama3_sft_debug.toml), made from the same Debian fortunes the default
job pre-trains on, so the fine-tuned model learns a format, not new text.

Three kinds of conversation, one a line:
  * {"messages": [system, user "Finish this fortune: <first half>",
    assistant "<the rest>"]}
  * {"prompt": "Tell me a fortune about <word>.", "completion": "<a fortune
    containing the word>"}
  * multi-turn: a fortune about a word, then "Another one about <word>." and a
    second fortune.
Only short, plain-ASCII fortunes are used (< 300 characters) so that every
conversation fits in a 512-token row with the default job's 2048-token BPE.
The output is a function of the corpus and the seed: rerunning it rewrites the
same bytes. The job holds out its validation split (validation.split) itself,
so one file is enough.

Usage: scripts/dev/make_fortune_chat.py [--corpus DIR] [--output FILE]
                                        [--conversations N] [--seed S]
Python 3 standard library only.
"""
import argparse
import json
import os
import random
import re
import sys

SYSTEM = "You complete fortunes."
MAX_CHARS = 300
MIN_WORDS = 6
# Words too common to be what a fortune is "about".
STOPWORDS = set("""
a about above after again against all also always am an and any are as at be because been before being below
between both but by can could did do does doing done down during each even ever every few for from further get
got had has have having he her here hers herself him himself his how however i if in into is it its itself just
know like made make many may me might more most much must my myself never no nor not now of off often on once
one only or other our ours ourselves out over own really said same say says see she should since so some still
such than that the their theirs them themselves then there these they thing things this those though through
thus to too under until up upon us very was way we well were what when where which while who whom whose why
will with without would yet you your yours yourself yourselves
""".split())


def read_fortunes(corpus):
    """Every fortune of every file in `corpus` (as titan's corpus reader lists
    them: sorted, .dat index files skipped, links to a listed file skipped)."""
    names = sorted(n for n in os.listdir(corpus) if not n.startswith(".") and not n.endswith(".dat"))
    paths = [os.path.join(corpus, n) for n in names if os.path.isfile(os.path.join(corpus, n))]
    paths.sort(key=lambda p: (os.path.islink(p), p))  # real files before links
    seen, fortunes = set(), []
    for path in paths:
        real = os.path.realpath(path)
        if real in seen:
            continue
        seen.add(real)
        with open(path, "rb") as f:
            data = f.read()
        for chunk in re.split(rb"(?m)^%\r?\n?", data):
            fortunes.append(chunk)
    return fortunes


def clean(raw):
    """A fortune as text we keep, or None: ASCII, printable, short, several words."""
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        return None
    text = text.replace("\t", "    ")
    if any(ord(c) < 32 and c != "\n" for c in text) or "\x7f" in text:
        return None  # overstriking (backspaces) and other control characters
    lines = [line.rstrip() for line in text.strip("\n").split("\n")]
    text = "\n".join(lines).strip()
    if not text or len(text) >= MAX_CHARS or len(text.split()) < MIN_WORDS:
        return None
    letters = sum(c.isalpha() for c in text)
    if letters < 0.6 * len(text.replace(" ", "").replace("\n", "")):
        return None  # ASCII art, tables
    return text


def topic_words(text):
    """Content words of a fortune in order of first appearance: lower-case
    words (not names) of four letters or more, outside the "-- Author" lines."""
    body = "\n".join(line for line in text.split("\n") if not line.lstrip().startswith("--"))
    words = []
    for word in re.findall(r"(?<![A-Za-z'])[a-z]{4,}(?![A-Za-z'])", body):
        if word not in STOPWORDS and word not in words:
            words.append(word)
    return words


def split_half(text, rng):
    """The fortune cut at a word boundary near its middle (prompt, completion)."""
    spaces = [m.start() for m in re.finditer(r"[ \n]", text)]
    middle = len(text) // 2
    spaces.sort(key=lambda i: (abs(i - middle), i))
    cut = spaces[min(len(spaces) - 1, rng.randrange(3))]
    return text[:cut].rstrip(), text[cut:].lstrip()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--corpus", default="/usr/share/games/fortunes")
    parser.add_argument("--output", default=os.path.join(root, "data", "fortune_chat", "train.jsonl"))
    parser.add_argument("--conversations", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=17)
    args = parser.parse_args()
    if not os.path.isdir(args.corpus):
        sys.exit(f"make_fortune_chat: {args.corpus} is missing: install Debian's fortunes package "
                 "(scripts/setup.sh) or pass --corpus")

    rng = random.Random(args.seed)
    fortunes, known = [], set()
    for raw in read_fortunes(args.corpus):
        text = clean(raw)
        if text is not None and text not in known:
            known.add(text)
            fortunes.append(text)
    rng.shuffle(fortunes)
    # Fortunes by the words they contain, for "about <word>" prompts.
    by_word = {}
    for index, text in enumerate(fortunes):
        for word in topic_words(text):
            by_word.setdefault(word, []).append(index)
    used = set()

    def fresh(indices):
        for i in indices:
            if i not in used:
                used.add(i)
                return fortunes[i]
        return None

    def about():
        """A word and an unused fortune about it (words of >= 3 fortunes, so a second turn can ask again)."""
        while True:
            i = rng.randrange(len(fortunes))
            if i in used:
                continue
            words = [w for w in topic_words(fortunes[i]) if len(by_word[w]) >= 3]
            if words:
                used.add(i)
                return rng.choice(words), fortunes[i]
            used.add(i)  # no usable word: skip it for good

    lines = []
    while len(lines) < args.conversations:
        kind = rng.random()
        if kind < 0.5:
            text = fresh(rng.sample(range(len(fortunes)), 8))
            if text is None:
                continue
            head, tail = split_half(text, rng)
            lines.append({"messages": [{"role": "system", "content": SYSTEM},
                                       {"role": "user", "content": f"Finish this fortune: {head}"},
                                       {"role": "assistant", "content": tail}]})
        elif kind < 0.85:
            word, text = about()
            lines.append({"prompt": f"Tell me a fortune about {word}.", "completion": text})
        else:
            word, first = about()
            second = fresh(by_word[word])
            follow = f"Another one about {word}, please."
            if second is None:  # every fortune with the word used: any other one
                second = fresh(rng.sample(range(len(fortunes)), 8))
                follow = "Another one, please."
            if second is None:
                continue
            lines.append({"messages": [{"role": "system", "content": SYSTEM},
                                       {"role": "user", "content": f"Tell me a fortune about {word}."},
                                       {"role": "assistant", "content": first},
                                       {"role": "user", "content": follow},
                                       {"role": "assistant", "content": second}]})

    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    temporary = args.output + ".partial"
    with open(temporary, "w", encoding="ascii", newline="\n") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=True) + "\n")
    os.replace(temporary, args.output)
    size = os.path.getsize(args.output)
    print(f"make_fortune_chat: {len(lines)} conversations from {len(fortunes)} short fortunes "
          f"({len(used)} used), {size / 1e6:.2f} MB -> {args.output}")


if __name__ == "__main__":
    main()
