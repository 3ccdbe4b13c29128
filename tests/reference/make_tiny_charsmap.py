"""Builds a small SentencePiece precompiled_charsmap (a Darts-clone double
array over UTF-8 keys, then the NUL-terminated replacements) from a few
rules, and writes a T5-like tokenizer.json around it: the seed that lets the
tokenizer.json fuzz target reach the charsmap and Unigram code within its
64 KiB input limit (a real nmt_nfkc charsmap is 237 KB).

Unit layout (darts.h): bits 0-7 the label, bit 8 "has a leaf", bits 10-30 the
offset to the children (child c of node n at n ^ offset ^ c; its value, when
it has a leaf, at n ^ offset); a value unit has bit 31 set. No two nodes share
a base, so a label found at a slot always belongs to the node looked from.

Usage: make_tiny_charsmap.py OUTFILE
"""
import base64
import json
import struct
import sys

RULES = {"Ａ": "A", "Ｂ": "B", "ａ": "a", "１": "1", "ﬁ": "fi", "①": "1", "™": "TM", "\u3000": " ",
         "ｶ": "カ", "ｶﾞ": "ガ", "e\u0301": "é", "\u200b": "", "\u00a0": " "}


def build(rules):
    keys = sorted((k.encode("utf-8"), v) for k, v in rules.items())
    strings, values = b"", {}
    for key, value in keys:
        values[key] = len(strings)
        strings += value.encode("utf-8") + b"\0"
    units = {}
    used_bases = set()  # a slot's parent is slot ^ label's base: each base serves one node (Darts' rule)

    def children_of(prefix):
        return sorted({k[len(prefix)] for k, _ in keys if k.startswith(prefix) and len(k) > len(prefix)})

    def place(node, prefix):
        labels = children_of(prefix)
        leaf = prefix in values and prefix != b""
        slots = ([0] if leaf else []) + labels
        base = 1
        while base in used_bases or any((base ^ s) in units or (base ^ s) == 0 for s in slots):
            base += 1
        used_bases.add(base)
        offset = node ^ base
        assert offset < (1 << 21)
        units[node] = (offset << 10) | (units.get(node, 0) & 0x1FF)
        if leaf:
            units[base] = (1 << 31) | values[prefix]
        for c in labels:
            child_leaf = (prefix + bytes([c])) in values
            units[base ^ c] = c | (child_leaf << 8)
        for c in labels:
            place(base ^ c, prefix + bytes([c]))

    units[0] = 0
    place(0, b"")
    size = max(units) + 1
    array = [units.get(i, 0) for i in range(size)]
    return struct.pack("<I", 4 * size) + struct.pack(f"<{size}I", *array) + strings


def main():
    charsmap = build(RULES)
    vocab = [["<pad>", 0.0], ["</s>", 0.0], ["<unk>", 0.0], ["▁", -2.0], ["A", -3.0], ["a", -3.1], ["1", -4.0],
             ["fi", -5.0], ["カ", -6.0], ["ガ", -6.5], ["é", -7.0], ["▁A", -2.5], ["TM", -8.0], ["B", -3.3]]
    eos = {"SpecialToken": {"id": "</s>", "type_id": 0}}
    root = {
        "version": "1.0",
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, t in enumerate(["<pad>", "</s>", "<unk>"])],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode("ascii")},
            {"type": "Strip", "strip_left": False, "strip_right": True},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "▁"}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "WhitespaceSplit"}, {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"}]},
        "post_processor": {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}}, eos],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}}, eos, {"Sequence": {"id": "B", "type_id": 0}}, eos],
                           "special_tokens": {"</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}}},
        "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"},
        "model": {"type": "Unigram", "unk_id": 2, "vocab": vocab, "byte_fallback": False},
    }
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(root, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
