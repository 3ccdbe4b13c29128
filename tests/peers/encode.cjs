// Encodes a UTF-8 text file with an independent tokenizer implementation, for
// the data tests to compare titan's ids against:
//   node encode.cjs tiktoken <encoding> <input> <output> [all|none]
//   node encode.cjs llama3 - <input> <output>
//   node encode.cjs hf <tokenizer.json> <input> <output>
// The ids are written as little-endian uint32. "all" lets tiktoken turn special
// token text into special tokens (llama3-tokenizer-js always does; so does
// @huggingface/tokenizers, the JavaScript port of Hugging Face's library, for
// the added tokens a tokenizer.json lists). No peer adds BOS/EOS here.
'use strict';
const fs = require('fs');
const path = require('path');

function fail(message) {
  process.stderr.write(`encode.cjs: ${message}\n`);
  process.exit(2);
}

const [peer, encoding, input, output, special] = process.argv.slice(2);
if (!peer || !input || !output) fail('usage: encode.cjs tiktoken|llama3|hf <encoding|file> <input> <output> [all|none]');
const text = fs.readFileSync(input, 'utf8');

async function encode() {
if (peer === 'tiktoken') {
  const { get_encoding } = require(path.join(__dirname, 'node_modules', 'tiktoken'));
  const enc = get_encoding(encoding);
  const ids = special === 'all' ? enc.encode(text, 'all') : enc.encode_ordinary(text);
  enc.free();
  return ids;
} else if (peer === 'llama3') {
  const { llama3Tokenizer } = require(path.join(__dirname, 'node_modules', 'llama3-tokenizer-js', 'bundle',
                                                'commonjs-llama3-tokenizer-with-baked-data.cjs'));
  return Uint32Array.from(llama3Tokenizer.encode(text, { bos: false, eos: false }));
} else if (peer === 'hf') {
  // An ES module only: Node 18 (Debian 12's) cannot require() it, only import() it.
  const entry = path.join(__dirname, 'node_modules', '@huggingface', 'tokenizers', 'dist', 'tokenizers.mjs');
  const { Tokenizer } = await import(require('url').pathToFileURL(entry).href);
  const tokenizer = new Tokenizer(JSON.parse(fs.readFileSync(encoding, 'utf8')), {});
  return Uint32Array.from(tokenizer.encode(text, { add_special_tokens: false }).ids);
}
fail(`unknown peer ${peer}`);
}

encode().then(
  (ids) => fs.writeFileSync(output, Buffer.from(ids.buffer, ids.byteOffset, ids.byteLength)),
  (error) => fail(error.stack || String(error)));
