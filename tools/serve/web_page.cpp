#include "web_page.h"

namespace tessera::serve {

// Element ids are what the browser test (python/test_serve_browser.py) drives: prompt, method,
// seed, generate, image, heatmap, stats, status, error.
const char* web_page() {
  return R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>tessera</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
  form { display: flex; gap: .6em; align-items: end; flex-wrap: wrap; }
  label { display: flex; flex-direction: column; font-size: .85em; gap: .2em; }
  input, select, button { font-size: 1em; padding: .3em; }
  #prompt { width: 18em; }
  #seed { width: 6em; }
  .view { display: flex; gap: 2em; margin-top: 1.5em; }
  figure { margin: 0; }
  figcaption { font-size: .85em; color: #555; max-width: 256px; }
  #image, #heatmap { width: 256px; height: 256px; image-rendering: pixelated; background: #eee;
                     border: 1px solid #ccc; }
  #stats { margin-top: 1em; font-family: ui-monospace, monospace; white-space: pre; }
  #error { color: #b00; margin-top: 1em; }
</style>
</head>
<body>
<h1>tessera</h1>
<div id="model"></div>
<form id="form">
  <label>prompt <input id="prompt" list="classes" required placeholder="red apple"></label>
  <datalist id="classes"></datalist>
  <label>method <select id="method"></select></label>
  <label>seed <input id="seed" type="number" min="0" value="0"></label>
  <button id="generate" type="submit">generate</button>
</form>
<div id="error"></div>
<div class="view">
  <figure><img id="image" alt="the image"><figcaption id="status">no image yet</figcaption></figure>
  <figure><canvas id="heatmap" width="256" height="256"></canvas>
    <figcaption>acceptance: dark where the target sampled the token; yellow, red, purple to blue
      where a draft was accepted at depth 1, 2, ...; grey not generated yet</figcaption></figure>
</div>
<div id="stats"></div>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let grid = 16;

async function load() {
  const r = await fetch("/v1/models");
  const m = (await r.json()).data[0];
  const t = m.tessera;
  $("model").textContent = `model ${m.id}: ${t.size}x${t.size} images, ${t.grid}x${t.grid} tokens`;
  grid = t.grid;
  for (const name of t.methods) {
    const o = document.createElement("option");
    o.value = o.textContent = name;
    if (name === t.method) o.selected = true;
    $("method").appendChild(o);
  }
  for (const c of t.classes || []) {
    const o = document.createElement("option");
    o.value = c;
    $("classes").appendChild(o);
  }
}

// Depth d >= 1 from yellow (1) through red and purple to blue (the deepest); 0 dark; 255 not
// generated yet, grey.
function colour(d, deepest) {
  if (d === 255) return "rgb(200,200,200)";
  if (d === 0) return "rgb(40,40,40)";
  const t = deepest > 1 ? (d - 1) / (deepest - 1) : 0;
  return `hsl(${Math.round(415 - 175 * t) % 360}, 90%, 55%)`;
}

function drawHeatmap(depth, tokens) {
  const c = $("heatmap"), ctx = c.getContext("2d"), cell = c.width / grid;
  const deepest = Math.max(1, ...depth.slice(0, tokens));
  for (let i = 0; i < grid * grid; ++i) {
    ctx.fillStyle = colour(i < tokens ? depth[i] : 255, deepest);
    ctx.fillRect((i % grid) * cell, Math.floor(i / grid) * cell, cell, cell);
  }
  c.dataset.tokens = tokens;
}

function showEvent(type, e) {
  if (type === "error") throw new Error(e.error.message);
  const t = e.tessera;
  $("image").src = "data:image/png;base64," + e.b64_json;
  drawHeatmap(t.accepted_depth, t.tokens);
  $("status").textContent = `${t.tokens} / ${t.total} tokens`;
  if (type === "image_generation.completed") {
    $("status").textContent = `done: ${e.revised_prompt}`;
    $("stats").textContent =
      `method           ${t.method}\n` +
      `tokens           ${t.tokens}\n` +
      `target forwards  ${t.target_forwards}\n` +
      `mean accepted    ${t.mean_accepted_length.toFixed(2)} tokens per round\n` +
      `seconds          ${t.seconds.toFixed(2)}\n` +
      `tokens/s         ${(t.tokens / t.seconds).toFixed(0)}`;
    $("stats").dataset.done = "1";
  }
}

async function generate(ev) {
  ev.preventDefault();
  $("error").textContent = $("stats").textContent = "";
  delete $("stats").dataset.done;
  $("generate").disabled = true;
  $("status").textContent = "queued";
  try {
    const body = {prompt: $("prompt").value, method: $("method").value,
                  seed: Number($("seed").value), n: 1, stream: true,
                  response_format: "b64_json"};
    const r = await fetch("/v1/images/generations", {method: "POST", body: JSON.stringify(body),
                          headers: {"Content-Type": "application/json"}});
    if (!r.ok) throw new Error((await r.json()).error.message);
    const reader = r.body.getReader(), text = new TextDecoder();
    let buf = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buf += text.decode(value, {stream: true});
      let end;
      while ((end = buf.indexOf("\n\n")) >= 0) {
        const frame = buf.slice(0, end);
        buf = buf.slice(end + 2);
        let type = "message", data = "";
        for (const line of frame.split("\n")) {
          if (line.startsWith("event: ")) type = line.slice(7);
          else if (line.startsWith("data: ")) data += line.slice(6);
        }
        if (data) showEvent(type, JSON.parse(data));
      }
    }
  } catch (err) {
    $("error").textContent = String(err.message || err);
    $("status").textContent = "failed";
  } finally {
    $("generate").disabled = false;
  }
}

$("form").addEventListener("submit", generate);
load().catch((err) => { $("error").textContent = "cannot load the model: " + err; });
</script>
</body>
</html>
)HTML";
}

}  // namespace tessera::serve
