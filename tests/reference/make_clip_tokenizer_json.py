"""Writes a small CLIP-style tokenizer.json: byte-level BPE with the "</w>"
end-of-word suffix, laid out as Hugging Face's CLIP converter writes
openai/clip-vit-large-patch14's file (NFC, whitespace runs to one space and
lowercase; the CLIP word regex with behaviour "removed" and invert; ByteLevel
without a prefix space; RobertaProcessing with <|startoftext|> and
<|endoftext|>; <|endoftext|> as unk). Its vocabulary has CLIP's order: the 256
byte characters, the same with "</w>", the merged tokens, then the two
specials; the merges are learned here from a small corpus, CLIP's way (words
of byte characters whose last one carries "</w>", the most frequent pair
merged first).

Usage: make_clip_tokenizer_json.py OUTFILE [MERGES]
"""
import collections
import json
import re
import sys
import unicodedata

WORD = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d|[^\W\d_]+|\d|[^\s\w]+|_+""")


def bytes_to_unicode():
    """GPT-2's printable stand-in character for each byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def corpus():
    text = ("A photo of a cat sitting on a red chair. A painting of a dog in the style of Van Gogh. "
            "An astronaut riding a horse on the moon, 4k, highly detailed! The quick brown fox jumps over "
            "the lazy dog. It's a beautiful day; we're going to the beach. Café, naïve, résumé, Straße. "
            "東京の夜景, ソウル, Москва, القاهرة. Photos of cats and dogs, 1990s film, 35mm, f/1.8. ") * 20
    return unicodedata.normalize("NFC", re.sub(r"\s+", " ", text)).lower()


def train(merges_wanted):
    byte_char = bytes_to_unicode()
    words = collections.Counter()
    for word in WORD.findall(corpus()):
        chars = [byte_char[b] for b in word.encode("utf-8")]
        words[tuple(chars[:-1] + [chars[-1] + "</w>"])] += 1
    merges = []
    for _ in range(merges_wanted):
        pairs = collections.Counter()
        for word, count in words.items():
            for a, b in zip(word, word[1:]):
                pairs[a, b] += count
        if not pairs:
            break
        best = max(pairs.items(), key=lambda item: (item[1], item[0]))[0]
        merges.append(best)
        merged = collections.Counter()
        for word, count in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += count
        words = merged
    alphabet = [byte_char[b] for b in range(256)]
    vocab = alphabet + [c + "</w>" for c in alphabet]
    for a, b in merges:
        if a + b not in vocab:
            vocab.append(a + b)
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    return {token: i for i, token in enumerate(vocab)}, merges


def main():
    out = sys.argv[1]
    vocab, merges = train(int(sys.argv[2]) if len(sys.argv) > 2 else 300)
    bos, eos = len(vocab) - 2, len(vocab) - 1
    special = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
    root = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": bos, "content": "<|startoftext|>", **special},
                         {"id": eos, "content": "<|endoftext|>", **special}],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFC"}, {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "},
            {"type": "Lowercase"}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split",
             "pattern": {"Regex": r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""},
             "behavior": "Removed", "invert": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]},
        "post_processor": {"type": "RobertaProcessing", "sep": ["<|endoftext|>", eos],
                           "cls": ["<|startoftext|>", bos], "trim_offsets": False, "add_prefix_space": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<|endoftext|>", "continuing_subword_prefix": "",
                  "end_of_word_suffix": "</w>", "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]},
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(root, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
