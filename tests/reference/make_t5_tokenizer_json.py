"""Writes T5-style tokenizer.json files from a real SentencePiece Unigram model.

spm_train (Debian's sentencepiece) trains a small Unigram model with T5's
settings (pad 0, </s> 1, <unk> 2, no BOS, the default nmt_nfkc normalization,
whose precompiled charsmap is the one T5's spiece.model carries). Its
ModelProto is read here by hand (pieces, scores, types, the charsmap) and laid
out as Hugging Face's T5 converter lays out tokenizer.json: the pieces then
<extra_id_N> in reverse order as the Unigram vocabulary, the control pieces
and extra ids as added tokens, "$A </s>" as the template. One file per
converter generation (the normalizer and pre-tokenizer changed over time):

  t5_legacy.json   Precompiled, Replace(" {2,}" -> " "); Metaspace(add_prefix_space)
  t5_current.json  Precompiled, Strip(right), Replace(" {2,}" -> "▁"); Metaspace(always, split)
  t5_words.json    Precompiled; WhitespaceSplit, Metaspace(always) (the Sequence some converters write)

Usage: make_t5_tokenizer_json.py OUTDIR
"""
import base64
import json
import os
import struct
import subprocess
import sys

EXTRA_IDS = 8  # T5 has 100; a few are enough to place them as T5 does


def corpus_lines():
    """Deterministic training text: English words, accents, full-width and CJK characters, digits."""
    words = ("the a of to and in is it you that he was for on are with as his they be at one have this from "
             "or had by hot word but what some we can out other were all there when up use your how said an "
             "each she which do their time if will way about many then them write would like so these her "
             "long make thing see him two has look more day could go come did number sound no most people my "
             "over know water than call first who may down side been now find any new work part take get place "
             "made live where after back little only round man year came show every good me give our under "
             "café naïve résumé über straße façade déjà piñata smörgåsbord "
             "東京 大阪 日本語 中文 한국어 русский язык العربية हिन्दी ไทย "
             "ＡＢＣ ｆｕｌｌ ｗｉｄｔｈ １２３ ｶﾀｶﾅ ㍻ ① ﬁ ﬂ").split()
    state = 12345
    for line in range(3000):
        out = []
        for _ in range(12):
            state = (state * 1103515245 + 12345) % (1 << 31)
            out.append(words[state % len(words)])
        if line % 7 == 0:
            out.append(str(state % 100000))
        yield " ".join(out)


def varint(data, pos):
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def fields(data):
    """(field number, wire type, value) of a protobuf message; value is bytes, int or a 4-byte float."""
    pos = 0
    while pos < len(data):
        key, pos = varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(data, pos)
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = varint(data, pos)
            value, pos = data[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = struct.unpack("<f", data[pos:pos + 4])[0], pos + 4
        else:
            raise ValueError(f"wire type {wire}")
        yield number, wire, value


def read_model(path):
    """Pieces [(text, score, type)] and the precompiled charsmap of a SentencePiece ModelProto."""
    data = open(path, "rb").read()
    pieces, charsmap = [], b""
    for number, _, value in fields(data):
        if number == 1:  # SentencePiece: 1 piece, 2 score, 3 type (1 normal, 2 unknown, 3 control)
            piece = {1: b"", 2: 0.0, 3: 1}
            for n, _, v in fields(value):
                piece[n] = v
            pieces.append((piece[1].decode("utf-8"), float(piece[2]), piece[3]))
        elif number == 3:  # NormalizerSpec: 2 precompiled_charsmap
            for n, _, v in fields(value):
                if n == 2:
                    charsmap = v
    return pieces, charsmap


def tokenizer_json(pieces, charsmap, variant):
    vocab = [[text, score] for text, score, _ in pieces]
    vocab += [[f"<extra_id_{i}>", 0.0] for i in range(EXTRA_IDS - 1, -1, -1)]
    added = [{"id": i, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True}
             for i, (text, _, kind) in enumerate(pieces) if kind in (2, 3)]
    added += [{"id": len(pieces) + EXTRA_IDS - 1 - i, "content": f"<extra_id_{i}>", "single_word": False,
               "lstrip": False, "rstrip": False, "normalized": False, "special": True}
              for i in range(EXTRA_IDS)]
    precompiled = {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode("ascii")}
    if variant == "legacy":
        normalizer = {"type": "Sequence", "normalizers": [
            precompiled, {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]}
        pre_tokenizer = {"type": "Metaspace", "replacement": "▁", "add_prefix_space": True}
        decoder = {"type": "Metaspace", "replacement": "▁", "add_prefix_space": True}
    elif variant == "current":
        normalizer = {"type": "Sequence", "normalizers": [
            precompiled, {"type": "Strip", "strip_left": False, "strip_right": True},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "▁"}]}
        pre_tokenizer = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
        decoder = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
    else:
        normalizer = precompiled
        pre_tokenizer = {"type": "Sequence", "pretokenizers": [
            {"type": "WhitespaceSplit"},
            {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}]}
        decoder = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
    eos = {"SpecialToken": {"id": "</s>", "type_id": 0}}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": normalizer, "pre_tokenizer": pre_tokenizer,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"Sequence": {"id": "A", "type_id": 0}}, eos],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, eos, {"Sequence": {"id": "B", "type_id": 0}}, eos],
            "special_tokens": {"</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}}},
        "decoder": decoder,
        "model": {"type": "Unigram", "unk_id": 2, "vocab": vocab, "byte_fallback": False},
    }


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    corpus = os.path.join(out, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(corpus_lines()) + "\n")
    prefix = os.path.join(out, "spiece")
    subprocess.run(["spm_train", f"--input={corpus}", f"--model_prefix={prefix}", "--vocab_size=320",
                    "--model_type=unigram", "--pad_id=0", "--eos_id=1", "--unk_id=2", "--bos_id=-1",
                    "--character_coverage=0.995", "--hard_vocab_limit=false", "--num_threads=1",
                    "--minloglevel=2"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pieces, charsmap = read_model(prefix + ".model")
    assert [p[0] for p in pieces[:3]] == ["<pad>", "</s>", "<unk>"], pieces[:3]
    assert len(charsmap) > 100000, "expected nmt_nfkc's precompiled charsmap"
    for variant in ("legacy", "current", "words"):
        with open(os.path.join(out, f"t5_{variant}.json"), "w", encoding="utf-8") as f:
            json.dump(tokenizer_json(pieces, charsmap, variant), f, ensure_ascii=False)


if __name__ == "__main__":
    main()
