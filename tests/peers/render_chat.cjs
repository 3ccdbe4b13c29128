// Renders chat templates with @huggingface/jinja, the JavaScript Jinja that
// Hugging Face's transformers.js applies chat templates with, for the data
// tests to compare titan's renders against byte for byte:
//   node render_chat.cjs <input.json> <output.json>
// input: {"template": "...", "cases": [{"messages": [...], "add_generation_prompt": bool,
//         "bos_token": "...", "eos_token": "..."}, ...]}
// output: a JSON array with one rendered string per case (or {"error": "..."}).
// Template() tokenizes with lstrip_blocks and trim_blocks on, as transformers does.
'use strict';
const fs = require('fs');
const path = require('path');
const { Template } = require(path.join(__dirname, 'node_modules', '@huggingface', 'jinja', 'dist', 'index.cjs'));

const [input, output] = process.argv.slice(2);
if (!input || !output) {
  process.stderr.write('usage: render_chat.cjs <input.json> <output.json>\n');
  process.exit(2);
}
const request = JSON.parse(fs.readFileSync(input, 'utf8'));
const template = new Template(request.template);
const results = request.cases.map((c) => {
  try {
    return template.render({
      messages: c.messages,
      tools: null,
      documents: null,
      add_generation_prompt: c.add_generation_prompt,
      bos_token: c.bos_token,
      eos_token: c.eos_token,
    });
  } catch (error) {
    return { error: String(error.message || error) };
  }
});
fs.writeFileSync(output, JSON.stringify(results));
