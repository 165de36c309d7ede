// The reference side of model/tokenizer/hf_conformance_test.sh: token ids of texts under a
// tokenizer.json with Hugging Face's own JavaScript tokenizers (@huggingface/tokenizers), no
// special tokens added; one JSON array per line, as hf-encode prints them.
//   node hf_encode.mjs TOOLS_DIR tokenizer.json tokenizer_config.json texts.jsonl
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [toolsDir, tokenizerPath, configPath, textsPath] = process.argv.slice(2);
const entry = path.join(toolsDir, "node_modules/@huggingface/tokenizers/dist/tokenizers.mjs");
const { Tokenizer } = await import(pathToFileURL(entry).href);
const tokenizer = new Tokenizer(
  JSON.parse(fs.readFileSync(tokenizerPath, "utf8")),
  JSON.parse(fs.readFileSync(configPath, "utf8")),
);
for (const line of fs.readFileSync(textsPath, "utf8").split("\n")) {
  if (line.trim() === "") continue;
  const { text } = JSON.parse(line);
  process.stdout.write(JSON.stringify(tokenizer.encode(text, { add_special_tokens: false }).ids) + "\n");
}
