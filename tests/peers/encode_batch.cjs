// Encodes a list of texts with Hugging Face tokenizers itself: the Rust
// library, as the npm package @anush008/tokenizers builds it for Node (a
// native module of tokenizers 0.22). This is the reference for tokenizer.json
// features the JavaScript port approximates (its Precompiled normalizer is
// NFKC, not the file's charsmap):
//   node encode_batch.cjs <tokenizer.json> <input.json> <output.json>
// input.json: {"texts": [...], "add_special_tokens": bool, and optionally
// "max_length" with "pad_id": truncation to that length and padding to it};
// output.json: one array of ids per text (with "mask": {"ids": [...], "mask": [...]}).
'use strict';
const fs = require('fs');
const path = require('path');

function fail(message) {
  process.stderr.write(`encode_batch.cjs: ${message}\n`);
  process.exit(2);
}

const [file, input, output] = process.argv.slice(2);
if (!file || !input || !output) fail('usage: encode_batch.cjs <tokenizer.json> <input.json> <output.json>');
const { Tokenizer } = require(path.join(__dirname, 'node_modules', '@anush008', 'tokenizers'));
const request = JSON.parse(fs.readFileSync(input, 'utf8'));

async function main() {
  const tokenizer = Tokenizer.fromFile(file);
  if (request.max_length !== undefined) {
    tokenizer.setTruncation(request.max_length);
    tokenizer.setPadding({ maxLength: request.max_length, padId: request.pad_id });
  }
  const ids = [];
  for (const text of request.texts) {
    const encoding = await tokenizer.encode(text, null, { addSpecialTokens: !!request.add_special_tokens });
    ids.push(request.max_length !== undefined ? { ids: encoding.getIds(), mask: encoding.getAttentionMask() }
                                              : encoding.getIds());
  }
  return ids;
}

main().then((ids) => fs.writeFileSync(output, JSON.stringify(ids)), (error) => fail(error.stack || String(error)));
