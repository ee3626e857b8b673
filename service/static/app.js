// The search page: POST /search/stream, cards that settle as stage 2 finishes, thumbnails and the
// moment's player through the media routes. Plain JavaScript, no build step, nothing external.
"use strict";

const $ = (id) => document.getElementById(id);
const KEY_STORE = "qaslr.apiKey";
const MAX_IMAGE_BYTES = 4 * 1024 * 1024;
const THUMB_SIZE = 160;

const state = {
  token: null, // media token for <img>/<video> (POST /media-token)
  tokenExpires: 0,
  image: null, // data URL of the image query
  lastRequest: null,
  nextToken: null,
  cards: new Map(), // result key -> card element
  controller: null,
};

// -- helpers -----------------------------------------------------------------------------------
function apiHeaders(extra = {}) {
  const key = sessionStorage.getItem(KEY_STORE);
  return key ? { ...extra, "X-API-Key": key } : extra;
}

function fmtTime(s) {
  if (s == null || !isFinite(s)) return "?";
  const m = Math.floor(s / 60);
  const sec = s - m * 60;
  return m ? `${m}:${sec.toFixed(1).padStart(4, "0")}` : `${sec.toFixed(1)} s`;
}

function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text != null) node.textContent = text;
  return node;
}

function showError(message, detail) {
  const box = $("error");
  box.textContent = "";
  box.append(el("strong", {}, message));
  if (detail) box.append(el("span", { class: "detail" }, " " + detail));
  box.hidden = false;
}

function clearError() {
  $("error").hidden = true;
  $("error").textContent = "";
}

async function errorOf(response) {
  // the API's error body: {"error": {"code", "message", "field"}, "request_id"}
  try {
    const body = await response.json();
    const err = body.error || {};
    const id = body.request_id ? ` (request ${body.request_id})` : "";
    return [`${response.status} ${err.code || response.statusText}`, `${err.message || ""}${id}`];
  } catch (e) {
    return [`${response.status} ${response.statusText}`, "the server's answer was not JSON"];
  }
}

// -- server status and media token ---------------------------------------------------------------
const HEAD_SOURCES = { checkpoint: "the checkpoint's head", QASLR_RERANK_HEAD: "rerank head", QASLR_TIME_HEAD: "QASLR_TIME_HEAD", index: "the index's head" };
async function loadStatus() {
  try {
    const r = await fetch("/readyz");
    const body = await r.json();
    if (r.ok) {
      // stage 2: the frame tier always; the heavy tier (one-shot or a streaming head) as the cascade says
      const margin = body.cascade ? body.cascade.heavy_margin : null;
      const when = margin === 0 ? "when a search asks" : margin >= 2 ? `on the top ${body.cascade.heavy}` : "on close calls";
      // a head that reads moments also answers, by default, the queries its router calls about time
      const timely = body.cascade && body.cascade.about_time ? "on queries about time and " : "";
      let text = `index ${body.index} · ${body.videos} videos · ${body.embedder} · stage 2: frame tier, ${body.rerank} ${timely}${when}`;
      // which head streams stage 2: the checkpoint's own, one named by QASLR_RERANK_HEAD, or the index's
      if (body.rerank_head_source) text += ` (${HEAD_SOURCES[body.rerank_head_source] || body.rerank_head_source}${body.rerank_head ? " " + body.rerank_head : ""})`;
      // an order goes to the streaming head where it reads the query's words (cascade.orders), else
      // orders and counts to the time head when one serves (engine.tiers.timehead)
      const orders = body.cascade && body.cascade.orders;
      if (orders) text += " · order: the streaming head";
      if (body.time_head_source) text += ` · ${orders ? "count" : "order and count"}: time head (${HEAD_SOURCES[body.time_head_source] || body.time_head_source}${body.time_head ? " " + body.time_head : ""})`;
      if (body.random_weights) text += " · ⚠ random weights: rankings are meaningless";
      $("server").textContent = text;
      $("shapes-world").hidden = !body.shapes_world;
      if (typeof body.min_relevance === "number") MIN_RELEVANCE = body.min_relevance;
    } else {
      $("server").textContent = `not ready: ${body.status}${body.error ? " — " + body.error : ""}`;
      setTimeout(loadStatus, 2000);
    }
  } catch (e) {
    $("server").textContent = "the server cannot be reached";
  }
}

async function mediaToken() {
  const now = Date.now() / 1000;
  if (state.token && state.tokenExpires - now > 60) return state.token;
  const r = await fetch("/media-token", { method: "POST", headers: apiHeaders() });
  if (r.status === 401) {
    $("keybox").open = true;
    throw new Error("This server needs an API key: enter it under “API key”.");
  }
  if (!r.ok) throw new Error((await errorOf(r)).join(": "));
  const body = await r.json();
  state.token = body.token;
  state.tokenExpires = body.expires_at;
  return state.token;
}

function mediaUrl(videoId) {
  const id = videoId.split("/").map(encodeURIComponent).join("/");
  return `/videos/${id}/media?token=${encodeURIComponent(state.token || "")}`;
}

function frameUrl(videoId, frameIndex) {
  const id = videoId.split("/").map(encodeURIComponent).join("/");
  return `/videos/${id}/frames/${frameIndex}?size=${THUMB_SIZE}&token=${encodeURIComponent(state.token || "")}`;
}

// -- the request ---------------------------------------------------------------------------------
function buildRequest() {
  const body = {};
  const q = $("q").value.trim();
  if (q) body.query = q;
  if (state.image) body.image = state.image;
  if (!q && !state.image) throw new Error("Type a query or choose an image.");
  body.mode = $("mode").value;
  body.group_by = $("group_by").value;
  body.sources = $("sources").value;
  if (body.sources === "said" && !q) throw new Error("Searching what is said needs words: type a query.");
  const topK = parseInt($("top_k").value, 10);
  if (topK) body.top_k = topK;
  const shortlist = parseInt($("shortlist").value, 10);
  if (shortlist) body.shortlist = shortlist;
  const minScore = $("min_score").value.trim();
  if (minScore !== "") body.min_score = parseFloat(minScore);
  const filter = $("filter").value.trim();
  if (filter) {
    try {
      body.filter = JSON.parse(filter);
    } catch (e) {
      throw new Error("The metadata filter is not valid JSON: " + e.message);
    }
  }
  return body;
}

async function runSearch(request) {
  clearError();
  if (state.controller) state.controller.abort();
  const controller = new AbortController();
  state.controller = controller;
  state.lastRequest = request;
  $("go").disabled = true;
  $("next").hidden = true;
  $("timings").hidden = true;
  $("warnings").hidden = true;
  setProgress("searching…");
  const t0 = performance.now();
  try {
    await mediaToken();
    const r = await fetch("/search/stream", {
      method: "POST",
      headers: apiHeaders({ "Content-Type": "application/json" }),
      body: JSON.stringify(request),
      signal: controller.signal,
    });
    if (!r.ok) {
      const [title, detail] = await errorOf(r);
      if (r.status === 401) $("keybox").open = true;
      throw Object.assign(new Error(title), { detail });
    }
    clearResults();
    await readLines(r, (message) => onMessage(message, request, t0));
  } catch (e) {
    if (e.name === "AbortError") return;
    setProgress("");
    showError(e.message || String(e), e.detail || "");
  } finally {
    if (state.controller === controller) {
      state.controller = null;
      $("go").disabled = false;
    }
  }
}

async function readLines(response, onLine) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (value) buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, cut).trim();
      buffer = buffer.slice(cut + 1);
      if (line) onLine(JSON.parse(line));
    }
    if (done) break;
  }
  if (buffer.trim()) onLine(JSON.parse(buffer));
}

function setProgress(text) {
  $("progress").textContent = text;
}

function onMessage(message, request, t0) {
  const ms = (performance.now() - t0).toFixed(0);
  if (message.type === "stage1") {
    render(message.results, "video", false, message.page_start);
    const stage2 = request.mode === "indexed" ? "" : " · stage 2 reranking…";
    setProgress(`stage 1: ${message.results.length} results in ${ms} ms${stage2}`);
  } else if (message.type === "update") {
    render(message.results, "video", false, message.page_start);
    const tiers = message.tiers || {};
    const parts = Object.entries(tiers).map(([t, n]) => `${TIER_LABELS[t] || t}: ${n}`);
    setProgress(`stage 2: ${parts.join(", ") || `${message.reranked} reranked`} of ${message.candidates} candidates (${ms} ms)`);
  } else if (message.type === "final") {
    const response = message.response;
    if (response.group_by === "clip") clearResults();
    render(response.results, response.group_by, true, response.page_start);
    showTimings(response.timings_ms, ms);
    showWarnings(response.warnings);
    const n = response.results.length;
    setProgress(n ? `${n} result${n > 1 ? "s" : ""} · done in ${ms} ms` : "no results");
    state.nextToken = response.next_page_token;
    $("next").hidden = !state.nextToken;
    document.body.dataset.searchDone = "1";
  } else if (message.type === "error") {
    showError(`${message.status} ${message.error.code}`, `${message.error.message} (request ${message.request_id})`);
    setProgress("");
  }
}

function showTimings(timings, clientMs) {
  const dl = $("timings");
  dl.textContent = "";
  const names = {
    queue: "queue", query_queue: "query queue", query_embed: "query embedding", filter: "filter", faiss: "stage 1 (FAISS)",
    spoken: "what is said (subtitles)", frame: "frame tier", selection: "frame selection", decode: "decode", heavy_queue: "heavy-tier queue",
    encode: "encode", head: "head (streaming or time)", moment: "moments", refine_queue: "refinement queue", refine: "moment refinement",
    total: "server total",
  };
  for (const [k, label] of Object.entries(names)) {
    const v = timings[k];
    if (!v && k !== "total") continue;
    const item = el("div", k === "total" ? { class: "total" } : {});
    item.append(el("dt", {}, label), el("dd", {}, `${v.toFixed(1)} ms`));
    dl.append(item);
  }
  const item = el("div");
  item.append(el("dt", {}, "in the browser"), el("dd", {}, `${clientMs} ms`));
  dl.append(item);
  dl.hidden = false;
}

function showWarnings(warnings) {
  const ul = $("warnings");
  ul.textContent = "";
  for (const w of warnings || []) ul.append(el("li", {}, w));
  ul.hidden = !(warnings && warnings.length);
}

// -- cards ---------------------------------------------------------------------------------------
function clearResults() {
  state.cards.clear();
  $("results").textContent = "";
  delete document.body.dataset.searchDone;
}

function keyOf(result, groupBy) {
  if (groupBy !== "clip") return result.video_id;
  const m = result.evidence && result.evidence.moment;
  return `${result.video_id}@${m ? m.start_s : ""}`;
}

function sharedScale(results) {
  // one scale for every card's relevance strip: an irrelevant video's strip stays low
  let lo = Infinity;
  let hi = -Infinity;
  for (const r of results) {
    for (const p of (r.timeline && r.timeline.points) || []) {
      lo = Math.min(lo, p.value);
      hi = Math.max(hi, p.value);
    }
  }
  return Number.isFinite(lo) ? { lo, hi } : null;
}

// ranks continue from page to page: the first card of a page is the answer's page_start
function render(results, groupBy, final = false, start = 1) {
  const list = $("results");
  const keep = new Set();
  const scale = sharedScale(results);
  results.forEach((result, i) => {
    const key = keyOf(result, groupBy);
    keep.add(key);
    let card = state.cards.get(key);
    if (!card) {
      card = $("card-template").content.firstElementChild.cloneNode(true);
      card.dataset.key = key;
      state.cards.set(key, card);
      setupCard(card);
    }
    fillCard(card, result, (start || 1) + i, groupBy, final, scale);
    list.append(card); // in rank order (moves an existing card)
  });
  for (const [key, card] of state.cards) {
    if (!keep.has(key)) {
      card.remove();
      state.cards.delete(key);
    }
  }
}

function setupCard(card) {
  const video = card.querySelector("video");
  video.addEventListener("loadedmetadata", () => seekToMoment(card));
  video.addEventListener("error", () => showPlayerError(card));
  const strip = card.querySelector(".strip");
  strip.addEventListener("keydown", (e) => {
    const points = card._timeline ? card._timeline.points : [];
    if (!points.length) return;
    let i = card._cursor == null ? 0 : card._cursor;
    if (e.key === "ArrowRight") i = Math.min(points.length - 1, i + 1);
    else if (e.key === "ArrowLeft") i = Math.max(0, i - 1);
    else if (e.key === "Home") i = 0;
    else if (e.key === "End") i = points.length - 1;
    else if (e.key === "Enter" || e.key === " ") {
      seek(card, points[i].start_s, true);
      e.preventDefault();
      return;
    } else return;
    e.preventDefault();
    card._cursor = i;
    markCursor(card);
    seek(card, points[i].start_s, false);
  });
}

async function showPlayerError(card) {
  // the server says why (e.g. no playable copy of this format could be made); the <video> cannot
  const video = card.querySelector("video");
  const p = card.querySelector(".player-error");
  const code = video.error ? video.error.code : 0;
  p.textContent = code === 4
    ? "This browser cannot play this video's format; thumbnails and times still apply."
    : "The video could not be loaded; thumbnails and times still apply.";
  p.hidden = false;
  const src = video.getAttribute("src");
  if (!src) return;
  try {
    const r = await fetch(src.split("#")[0], { headers: { Range: "bytes=0-0" } });
    if (!r.ok) p.textContent = `${(await errorOf(r))[1]} Thumbnails and times still apply.`;
  } catch (e) {
    /* the message above stands */
  }
}

function seekToMoment(card) {
  const m = card._moment;
  if (m) card.querySelector("video").currentTime = m.start_s;
}

function seek(card, seconds, play) {
  const video = card.querySelector("video");
  if (!video.getAttribute("src")) return;
  video.currentTime = seconds;
  if (play) video.play().catch(() => {});
}

const TIER_LABELS = { frame: "frame tier", oneshot: "one-shot tier", head: "head tier", time: "time head (order, count)" };
// the server's documented threshold (core.config.MIN_RELEVANCE; /readyz says it as min_relevance)
let MIN_RELEVANCE = 0.85;

// What a result's relevance says: for most tiers whether the video holds anything like the query;
// for the time head's (an order or a count) whether its events show, in the order or number asked
// (engine.tiers.timehead.time_relevance), so a weak one there is "not as asked", not "nothing like it".
function relevanceLabel(result) {
  const value = result.relevance;
  if (value == null) return { text: "", title: "", weak: false };
  const weak = value < MIN_RELEVANCE;
  const shown = value.toFixed(2);
  if (result.tier === "time") {
    // weak because an event does not show at all, or because they do not show as asked
    const events = result.events_relevance;
    const missing = events != null && events < MIN_RELEVANCE;
    let why = "an event does not show, or not as asked";
    if (missing) why = `an event the query names does not show (the weakest reads ${events.toFixed(2)})`;
    else if (weak && events != null) why = "every event shows, but not in the order or number asked";
    let text = `relevance ${shown}`;
    if (weak) text = `${missing ? "an event does not show" : "not as asked"} (relevance ${shown})`;
    return {
      text,
      title: "whether the video shows every event the query names, in the order or number asked, 0 to 1, "
        + `comparable across queries; below ${MIN_RELEVANCE} ${why}`,
      weak,
    };
  }
  return {
    text: weak ? `no good match (relevance ${shown})` : `relevance ${shown}`,
    title: "whether the video holds what the query describes, 0 to 1, comparable across queries; "
      + `below ${MIN_RELEVANCE} nothing like it is there`,
    weak,
  };
}

function fillCard(card, result, rank, groupBy, final, scale) {
  const meta = result.metadata || {};
  card.querySelector(".title").textContent = meta.title || result.video_id;
  card.querySelector(".title").title = result.video_id;
  // score means one thing per tier (its label says which); relevance is the cross-tier number
  const scoreEl = card.querySelector(".score");
  scoreEl.textContent = result.source === "said"
    ? `BM25 ${result.score.toPrecision(3)}`
    : result.seen_score != null
      ? `fused score ${result.score.toFixed(3)}`
      : `${result.tier ? TIER_LABELS[result.tier] || result.tier : "stage 1"} score ${result.score.toFixed(3)}`;
  scoreEl.title = "the ranking score of the tier that ranked it: compare results by relevance";
  const rel = card.querySelector(".relevance");
  if (rel) {
    const label = relevanceLabel(result);
    rel.textContent = label.text;
    rel.title = label.title;
    rel.classList.toggle("weak", label.weak);
    card.classList.toggle("weak", label.weak);
  }
  const move = card.querySelector(".move");
  const from = result.stage1_rank;
  if (from == null) {  // found only by what is said
    move.textContent = groupBy === "clip" ? "" : `#${rank}`;
    move.className = "move";
    move.title = "found by its subtitles, outside the visual shortlist";
  } else {
    move.textContent = groupBy === "clip" ? `video #${from} in stage 1` : `#${from} → #${rank}`;
    move.className = "move" + (from > rank ? " up" : from < rank ? " down" : "");
    move.title = result.reranked
      ? `stage 1: #${from} (score ${result.stage1_score.toFixed(3)}); after stage 2: #${rank}`
      : `stage 1 only: #${from}`;
  }
  const source = card.querySelector(".source");
  source.textContent = SOURCE_LABELS[result.source] || "seen";
  source.dataset.source = result.source || "seen";
  source.title = "which ranking found it: its frames (seen), its subtitles (said), or both";
  showSpoken(card, result.spoken);
  const tier = card.querySelector(".tier");
  tier.textContent = TIER_LABELS[result.tier] || (result.tier ? `${result.tier} tier` : "stage 1");
  tier.title = result.tier ? `ranked by the ${tier.textContent}` : "ranked by stage 1 (the index) only";
  tier.dataset.tier = result.tier || "stage1";
  card.classList.toggle("reranked", !!result.reranked);
  card.classList.toggle("pending", !result.reranked && !result.evidence);

  const parts = [];
  if (result.duration_s != null) parts.push(fmtTime(result.duration_s));
  for (const [k, v] of Object.entries(meta)) {
    if (k !== "title") parts.push(`${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`);
  }
  if (result.clips_used != null) parts.push(`clips streamed: ${result.clips_used}/${result.clips_planned}`);
  if (result.video_score != null) parts.push(`video score ${result.video_score.toFixed(3)}`);
  card.querySelector(".meta").textContent = parts.join(" · ");

  const evidence = result.evidence;
  const moment = evidence && evidence.moment;
  const momentP = card.querySelector(".moment");
  momentP.textContent = "";
  if (moment) {
    const play = el("button", { type: "button", class: "play" }, `▶ ${fmtTime(moment.start_s)} – ${fmtTime(moment.end_s)}`);
    play.title = moment.source === "cue"
      ? "the subtitle cue that matched the query"
      : moment.source === "time"
        ? "from the first showing the query asks about to the last"
      : moment.source === "refined"
        ? "the frames around the relevance peak, edges found at the video's own frame rate"
        : "the frames around the relevance peak (frame-bank resolution)";
    play.addEventListener("click", () => seek(card, moment.start_s, true));
    momentP.append(el("span", {}, "Moment "), play);
  } else {
    momentP.textContent = final ? "" : "waiting for stage 2…";
  }
  const changed = !card._moment || !moment || card._moment.start_s !== (moment && moment.start_s);
  card._moment = moment || null;
  const video = card.querySelector("video");
  if (moment && !video.getAttribute("src")) {
    video.src = mediaUrl(result.video_id) + `#t=${moment.start_s}`;
  } else if (moment && changed && video.readyState >= 1) {
    seekToMoment(card);
  }
  card.querySelector(".player").hidden = !moment;

  const thumbs = card.querySelector(".thumbs");
  const frames = shownFrames((evidence && evidence.frames) || [], moment);
  const sig = frames.map((f) => f.frame_index).join(",");
  if (thumbs.dataset.sig !== sig) {
    thumbs.dataset.sig = sig;
    thumbs.textContent = "";
    for (const f of frames) {
      const b = el("button", { type: "button", class: "thumb", title: `frame ${f.frame_index} at ${fmtTime(f.timestamp_s)} · relevance ${f.relevance.toFixed(3)}` });
      const img = el("img", { alt: `frame ${f.frame_index} at ${fmtTime(f.timestamp_s)}`, loading: "eager", src: frameUrl(result.video_id, f.frame_index) });
      img.addEventListener("error", () => b.classList.add("broken"));
      b.append(img, el("span", {}, fmtTime(f.timestamp_s)));
      b.addEventListener("click", () => seek(card, f.timestamp_s, false));
      thumbs.append(b);
    }
  }
  drawTimeline(card, result.timeline, moment, result.duration_s, scale);
}

const SOURCE_LABELS = { seen: "seen", said: "said", both: "seen + said" };

function showSpoken(card, spoken) {
  // what was said: the cue's time (a button that plays it) and its snippet, matched words marked
  const p = card.querySelector(".spoken");
  p.hidden = !spoken;
  if (!spoken) return;
  const time = p.querySelector(".said-time");
  time.textContent = `🗨 ${fmtTime(spoken.start_s)} – ${fmtTime(spoken.end_s)}`;
  time.title = `said at ${fmtTime(spoken.start_s)}: play from there`;
  time.onclick = () => seek(card, spoken.start_s, true);
  const q = p.querySelector(".said-text");
  q.textContent = "";
  const chars = Array.from(spoken.snippet || spoken.text); // highlights count code points, as the server does
  const part = (a, b) => chars.slice(a, b).join("");
  let at = 0;
  for (const [a, b] of spoken.highlights || []) {
    if (a < at || b > chars.length) continue;
    q.append(document.createTextNode(part(at, a)), el("mark", {}, part(a, b)));
    at = b;
  }
  q.append(document.createTextNode(part(at, chars.length)));
  q.title = spoken.text;
}

const MAX_THUMBS = 8;

function shownFrames(frames, moment) {
  // the evidence frames inside the moment first, then the most relevant; shown in time order
  const inMoment = (f) => moment && f.timestamp_s >= moment.start_s && f.timestamp_s < moment.end_s;
  const ranked = [...frames].sort((a, b) => (inMoment(b) - inMoment(a)) || (b.relevance - a.relevance));
  return ranked.slice(0, MAX_THUMBS).sort((a, b) => a.timestamp_s - b.timestamp_s);
}

function drawTimeline(card, timeline, moment, duration, scale) {
  const strip = card.querySelector(".strip");
  card._timeline = timeline;
  strip.textContent = "";
  strip.hidden = !timeline || !timeline.points.length;
  if (strip.hidden) return;
  const points = timeline.points;
  const values = points.map((p) => p.value);
  const lo = scale ? scale.lo : Math.min(...values);
  const hi = scale ? scale.hi : Math.max(...values);
  const span = Math.max(duration || 0, points[points.length - 1].end_s) || 1;
  strip.title = timeline.source === "streaming"
    ? "readout similarity q·z_t after each streamed clip"
    : "frame relevance q·f over time";
  strip.setAttribute("aria-valuemin", "0");
  strip.setAttribute("aria-valuemax", String(points.length - 1));
  for (const [i, p] of points.entries()) {
    const bar = el("span", { class: "bar" });
    const level = hi > lo ? Math.min(1, Math.max(0, (p.value - lo) / (hi - lo))) : 1;
    bar.style.left = `${(100 * p.start_s) / span}%`;
    bar.style.width = `${Math.max(0.6, (100 * (p.end_s - p.start_s)) / span)}%`;
    bar.style.height = `${12 + 88 * level}%`;
    if (moment && p.start_s < moment.end_s && p.end_s > moment.start_s) bar.classList.add("in-moment");
    bar.title = `${fmtTime(p.start_s)}–${fmtTime(p.end_s)}: ${p.value.toFixed(3)}`;
    bar.addEventListener("click", () => {
      card._cursor = i;
      markCursor(card);
      seek(card, p.start_s, false);
    });
    strip.append(bar);
  }
  if (moment) {
    const mark = el("span", { class: "moment-mark" });
    mark.style.left = `${(100 * moment.start_s) / span}%`;
    mark.style.width = `${Math.max(0.8, (100 * (moment.end_s - moment.start_s)) / span)}%`;
    mark.title = `moment ${fmtTime(moment.start_s)} – ${fmtTime(moment.end_s)}`;
    strip.append(mark);
  }
  markCursor(card);
}

function markCursor(card) {
  const bars = card.querySelectorAll(".strip .bar");
  bars.forEach((b, i) => b.classList.toggle("cursor", i === card._cursor));
  if (card._cursor != null) card.querySelector(".strip").setAttribute("aria-valuenow", String(card._cursor));
}

// -- wiring ----------------------------------------------------------------------------------------
function onImageChosen() {
  const file = $("image").files[0];
  if (!file) return;
  if (file.size > MAX_IMAGE_BYTES) {
    showError("The image is too large", `at most ${MAX_IMAGE_BYTES / 1048576} MiB`);
    $("image").value = "";
    return;
  }
  const reader = new FileReader();
  reader.onload = () => {
    state.image = reader.result;
    $("image-preview").src = reader.result;
    $("image-info").hidden = false;
  };
  reader.onerror = () => showError("The image could not be read", "");
  reader.readAsDataURL(file);
}

function init() {
  loadStatus();
  const saved = sessionStorage.getItem(KEY_STORE);
  if (saved) $("key").value = saved;
  $("search").addEventListener("submit", (e) => {
    e.preventDefault();
    try {
      runSearch(buildRequest());
    } catch (err) {
      showError(err.message, "");
    }
  });
  $("next").addEventListener("click", () => {
    if (state.lastRequest && state.nextToken) runSearch({ ...state.lastRequest, page_token: state.nextToken });
  });
  $("image").addEventListener("change", onImageChosen);
  $("image-clear").addEventListener("click", () => {
    state.image = null;
    $("image").value = "";
    $("image-info").hidden = true;
  });
  $("key-save").addEventListener("click", () => {
    const key = $("key").value.trim();
    if (key) sessionStorage.setItem(KEY_STORE, key);
    else sessionStorage.removeItem(KEY_STORE);
    state.token = null;
    $("keybox").open = false;
    $("q").focus();
  });
  document.addEventListener("keydown", (e) => {
    const typing = /^(INPUT|TEXTAREA|SELECT)$/.test(document.activeElement.tagName);
    if (e.key === "/" && !typing) {
      e.preventDefault();
      $("q").focus();
      $("q").select();
    } else if (e.key === "Escape" && state.controller) {
      state.controller.abort();
      setProgress("stopped");
    }
  });
}

document.addEventListener("DOMContentLoaded", init);
