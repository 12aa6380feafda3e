// The dphr web page: asks POST compare and POST file-upload of the same server and shows the answers (with
// "Not in these documents" when the option asks for the no-answer and it comes first).
// Every piece of document text becomes a text node (textContent / append of strings), never markup.
"use strict";

(function () {
  const RADIUS = 150; // characters of context shown on each side of a highlighted phrase (until clicked)
  const STOPWORDS = new Set(
    ("a an and are as at be by did do does for from had has have how in into is it its of on or the to was " +
      "were what when where which who whom whose why with").split(" ")
  );

  const byId = (id) => document.getElementById(id);

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  async function call(path, options) {
    const response = await fetch(path, options);
    let body = null;
    try {
      body = await response.json();
    } catch (ignored) {
      body = null;
    }
    if (!response.ok) {
      const errors = body && Array.isArray(body.errors) ? body.errors.join("; ") : "";
      const error = new Error(errors || `the server answered ${response.status}`);
      error.status = response.status;
      throw error;
    }
    return body;
  }

  function showError(message) {
    const box = byId("error");
    box.textContent = message || "";
    box.hidden = !message;
  }

  function latency(ms) {
    return `${ms < 10 ? ms.toFixed(1) : Math.round(ms)} ms`;
  }

  function queryTerms(question) {
    const words = (question.toLowerCase().match(/[\p{L}\p{N}]+/gu) || []).filter(
      (w) => w.length > 2 && !STOPWORDS.has(w)
    );
    return Array.from(new Set(words));
  }

  function escapeRegExp(text) {
    return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  }

  // Append ``text`` to ``parent``, underlining the question's words.
  function appendWithTerms(parent, text, terms) {
    if (!terms.length || !text) {
      parent.append(text);
      return;
    }
    const pattern = new RegExp(`(?<![\\p{L}\\p{N}])(${terms.map(escapeRegExp).join("|")})(?![\\p{L}\\p{N}])`, "giu");
    let last = 0;
    for (const match of text.matchAll(pattern)) {
      parent.append(text.slice(last, match.index));
      parent.append(el("span", "term", match[0]));
      last = match.index + match[0].length;
    }
    parent.append(text.slice(last));
  }

  // A passage with the phrase [start, end) (code point offsets, as Python counts them) highlighted; a window of
  // RADIUS characters around it until clicked, then the whole passage.
  function passage(content, start, end, terms) {
    const chars = Array.from(content || "");
    const hasPhrase = Number.isInteger(start) && Number.isInteger(end) && start >= 0 && end > start && end <= chars.length;
    const node = el("p", "passage");
    function render(whole) {
      node.replaceChildren();
      let from = whole ? 0 : Math.max(0, (hasPhrase ? start : 0) - RADIUS);
      let to = whole ? chars.length : Math.min(chars.length, (hasPhrase ? end : 0) + (hasPhrase ? RADIUS : 2 * RADIUS));
      while (from > 0 && from < (hasPhrase ? start : to) && !/\s/.test(chars[from - 1])) from += 1; // whole words
      while (to < chars.length && to > (hasPhrase ? end : from) && !/\s/.test(chars[to])) to -= 1;
      if (from > 0) node.append("… ");
      if (hasPhrase) {
        appendWithTerms(node, chars.slice(from, start).join(""), terms);
        node.append(el("mark", "phrase", chars.slice(start, end).join("")));
        appendWithTerms(node, chars.slice(end, to).join(""), terms);
      } else {
        appendWithTerms(node, chars.slice(from, to).join(""), terms);
      }
      if (to < chars.length) node.append(" …");
      node.classList.toggle("expanded", whole || (from === 0 && to === chars.length));
      node.title = node.classList.contains("expanded") ? "" : "Click to show the whole passage";
    }
    render(false);
    node.addEventListener("click", () => render(true));
    return node;
  }

  // A probability in percent: "<1%" and ">99%" at the ends, never "0%" or "100%".
  function percent(value) {
    if (value < 0.005) return "<1%";
    if (value > 0.995) return ">99%";
    return `${Math.round(value * 100)}%`;
  }

  function fixed2(value) {
    return typeof value === "number" ? value.toFixed(2) : "?";
  }

  // What each column's numbers are (the /compare columns; pipelines/*.yml say how each score is made): the label
  // of one number, its tooltip, and the column's note.
  const UNCALIBRATED_NOTE =
    "Phrase score: the raw phrase score squashed to (0, 1). This model has no calibration, so it is no " +
    "probability; it ranks within one question only.";
  const SCORE_KINDS = {
    bm25: {
      label: (score) => `BM25 ${fixed2(score)} (scaled, not a probability)`,
      title: "BM25 relevance squashed to (0, 1) by expit(BM25 / 8); compare within one question only",
      note:
        "BM25: keyword relevance squashed to (0, 1) by expit(BM25 / 8). It ranks passages within one question; " +
        "not a probability, and even an unrelated passage can get 0.9.",
    },
    passages: {
      label: (score) => `confidence ${percent(score)}`,
      title: "calibrated probability that the highlighted phrase of this passage is the right answer",
      note:
        "Confidence: the calibrated probability that the passage's highlighted phrase is the right answer. This " +
        "column runs its own phrase search, so it can differ by a point from the same answer's above.",
    },
    hybrid: {
      label: (score) => `RRF ${fixed2(score)} (rank fusion, not a probability)`,
      title: "reciprocal rank fusion of the BM25 and phrase rankings: 1 = ranked first by both",
      note:
        "RRF: reciprocal rank fusion of the BM25 and phrase passage rankings, scaled so 1 means ranked first by " +
        "both. It uses ranks only: not a probability, and a wrong passage can get 0.96.",
    },
  };
  const UNCALIBRATED = {
    label: (score) => `phrase score ${fixed2(score)} (not calibrated)`,
    title: "raw phrase score squashed to (0, 1); this model has no calibration",
    note: UNCALIBRATED_NOTE,
  };
  const OTHER = { label: (score) => `score ${fixed2(score)}`, title: "this pipeline's score", note: "" };

  function scoreKind(column) {
    const calibrated = column.documents.every((doc) => typeof (doc.meta || {}).best_phrase_confidence === "number");
    if (column.name === "passages" && !calibrated) return UNCALIBRATED;
    return SCORE_KINDS[column.name] || OTHER;
  }

  function sourceLine(meta) {
    const parts = [];
    if (meta && meta.title) parts.push(String(meta.title).replace(/_/g, " "));
    if (meta && meta.name && meta.name !== meta.title) parts.push(meta.name);
    return el("div", "source", parts.join(" · "));
  }

  function confidenceBadge(answer) {
    const meta = answer.meta || {};
    const calibrated = typeof meta.confidence === "number";
    const value = calibrated ? meta.confidence : answer.score;
    const level = !calibrated ? "" : value >= 0.5 ? " high" : value >= 0.2 ? " mid" : "";
    const badge = el("span", `confidence${level}`);
    const meter = el("span", "meter");
    const fill = el("span");
    fill.style.width = `${Math.round(Math.max(0, Math.min(1, value || 0)) * 100)}%`;
    meter.append(fill);
    const kind = calibrated ? null : UNCALIBRATED;
    const label = calibrated ? `confidence ${percent(value)}` : kind.label(value);
    badge.append(meter, el("span", "confidence-label", label));
    badge.title = calibrated ? "calibrated probability that this answer is right" : kind.title;
    return badge;
  }

  // "No answer" (asked for with no_answer): an answer with empty text and meta.no_answer, scored P(the documents
  // hold no answer) = 1 - meta.holds_answer (a model without it: 1 - the top answer's confidence).
  function isNoAnswer(answer) {
    return Boolean((answer.meta || {}).no_answer);
  }

  function noAnswerBadge(answer) {
    const value = typeof answer.score === "number" ? answer.score : 0;
    const level = value >= 0.5 ? " high" : value >= 0.2 ? " mid" : "";
    const badge = el("span", `confidence${level}`);
    const meter = el("span", "meter");
    const fill = el("span");
    fill.style.width = `${Math.round(Math.max(0, Math.min(1, value)) * 100)}%`;
    meter.append(fill);
    badge.append(meter, el("span", "confidence-label", `probability ${percent(value)}`));
    badge.title =
      typeof (answer.meta || {}).holds_answer === "number"
        ? "calibrated probability that these documents hold no answer to the question"
        : "calibrated probability that these documents hold no right answer (1 - the top answer's confidence)";
    return badge;
  }

  // The no-answer: above the answers, which become best guesses, when it comes first (the documents probably hold no
  // answer); a line below them when it comes last; nothing when it was not asked for.
  function renderNoAnswer(noAnswer, first, answers) {
    const box = byId("no-answer");
    const last = byId("no-answer-last");
    box.replaceChildren();
    last.replaceChildren();
    box.hidden = !(noAnswer && first);
    last.hidden = !(noAnswer && !first);
    byId("guesses").hidden = !(noAnswer && first && answers.length);
    byId("answer-list").classList.toggle("guesses-list", Boolean(noAnswer && first));
    if (!noAnswer) return;
    const top = (noAnswer.meta || {}).top_confidence;
    const holds = (noAnswer.meta || {}).holds_answer;
    // the question's names that no document writes (as the question writes them), when the model weighs them
    const unwritten = (noAnswer.meta || {}).unwritten_names;
    const missing =
      Array.isArray(unwritten) && unwritten.length
        ? ` No document writes ${unwritten.map((name) => `“${name}”`).join(", ")}.`
        : "";
    if (first) {
      const head = el("div", "answer-head");
      head.append(el("span", "no-answer-text", "Not in these documents"), noAnswerBadge(noAnswer));
      let why = "No phrase answer was found in the documents.";
      if (typeof holds === "number") {
        why =
          `These documents hold an answer to the question with a ${percent(holds)} chance (the best answer found ` +
          `has a ${percent(top)} chance of being right). The answers below are best guesses.`;
      } else if (typeof top === "number") {
        why =
          `The best answer found has a ${percent(top)} chance of being right, so these documents probably do ` +
          "not answer the question. The answers below are best guesses.";
      }
      box.append(head, el("p", "no-answer-note", why + missing));
    } else {
      last.append(el("span", "no-answer-text", "Not in these documents"), " ", noAnswerBadge(noAnswer));
    }
  }

  function renderAnswers(column) {
    const list = byId("answer-list");
    list.replaceChildren();
    byId("answers-latency").textContent = latency(column.ms);
    const noAnswer = column.answers.find(isNoAnswer);
    const first = column.answers.length > 0 && isNoAnswer(column.answers[0]);
    const answers = column.answers.filter((answer) => !isNoAnswer(answer));
    renderNoAnswer(noAnswer, first, answers);
    const calibrated = answers.every((answer) => typeof (answer.meta || {}).confidence === "number");
    byId("answers-note").textContent = calibrated
      ? "Confidence: the calibrated probability that the answer is right; unlike BM25 and RRF below, it means the " +
        "same for every question."
      : UNCALIBRATED_NOTE;
    if (!answers.length) {
      list.append(el("li", "empty", "No phrase answer."));
    }
    for (const answer of answers) {
      const item = el("li", "answer");
      const head = el("div", "answer-head");
      head.append(el("span", "answer-text", answer.answer), confidenceBadge(answer));
      const span = (answer.offsets_in_context || [])[0] || {};
      item.append(head, passage(answer.context, span.start, span.end, []), sourceLine(answer.meta));
      list.append(item);
    }
    byId("answers").hidden = false;
  }

  function renderColumn(column, terms) {
    const panel = el("section", "panel column");
    panel.dataset.name = column.name;
    const head = el("header", "panel-head");
    const name = el("div", "column-name");
    name.append(el("h3", "", column.title), el("span", "pipeline", column.pipeline));
    head.append(name, el("span", "latency", latency(column.ms)));
    const kind = scoreKind(column);
    const list = el("ol", "results");
    if (!column.documents.length) list.append(el("li", "empty", "No results."));
    column.documents.forEach((doc, i) => {
      const meta = doc.meta || {};
      const item = el("li", "result");
      const top = el("div", "result-head");
      const score = el("span", "score", typeof doc.score === "number" ? kind.label(doc.score) : "");
      score.title = kind.title;
      top.append(el("span", "rank", `#${i + 1}`), score);
      item.append(top, passage(doc.content, meta.best_phrase_start, meta.best_phrase_end, terms), sourceLine(meta));
      list.append(item);
    });
    panel.append(head);
    if (kind.note) panel.append(el("p", "score-note", kind.note));
    panel.append(list);
    return panel;
  }

  async function refreshStore() {
    try {
      const info = await call("store");
      const phrases = typeof info.phrase_documents === "number" ? ` (${info.phrase_documents} with phrases)` : "";
      byId("store").textContent = `${info.documents} passages in the store${phrases} · Haystack ${info.hs_version}`;
    } catch (error) {
      byId("store").textContent = "";
    }
  }

  // Remove the answers and columns of an earlier question.
  function clearResults() {
    byId("answer-list").replaceChildren();
    renderNoAnswer(undefined, false, []);
    byId("answers").hidden = true;
    byId("columns").replaceChildren();
    byId("columns").hidden = true;
  }

  // The message for a question the server refused with 413 (its bound is in the server's message).
  function tooLong(question, serverMessage) {
    const bound = /DPHR_MAX_QUERY_CHARS=(\d+)/.exec(serverMessage);
    const limit = bound ? Number(bound[1]) : byId("question").maxLength;
    return (
      `The question is too long: ${Array.from(question).length} characters, over this server's limit of ` +
      `${limit} (DPHR_MAX_QUERY_CHARS). Shorten it and ask again.`
    );
  }

  async function ask(event) {
    event.preventDefault();
    const question = byId("question").value.trim();
    if (!question) {
      clearResults();
      showError("Type a question first.");
      byId("question").focus();
      return;
    }
    const button = byId("ask-button");
    button.disabled = true;
    button.textContent = "Searching…";
    showError("");
    try {
      const result = await call("compare", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({
          query: question,
          top_k: Number(byId("top-k").value),
          no_answer: byId("no-answer-option").checked,
          verify: byId("verify-option").checked,
        }),
      });
      const terms = queryTerms(question);
      const columns = byId("columns");
      columns.replaceChildren();
      for (const column of result.columns) {
        if (column.name === "answers") renderAnswers(column);
        else columns.append(renderColumn(column, column.name === "bm25" ? terms : []));
      }
      columns.hidden = false;
    } catch (error) {
      clearResults(); // they answered another question
      showError(error.status === 413 ? tooLong(question, error.message) : error.message);
    } finally {
      button.disabled = false;
      button.textContent = "Ask";
    }
  }

  function plural(count, word) {
    return `${count} ${word}${count === 1 ? "" : "s"}`;
  }

  // One line per uploaded file: what it added, what was already stored or repeated, and why (its notes).
  function renderFileReports(reports) {
    const list = byId("upload-report");
    list.replaceChildren();
    for (const report of reports || []) {
      const item = el("li", "file-report");
      const about = [];
      if (typeof report.passages === "number") about.push(plural(report.passages, "passage"));
      if (report.encoding) about.push(`read as ${report.encoding}`);
      item.append(
        el("span", "file-name", `${report.file}:`),
        ` ${report.documents_added} added, ${report.already_stored} already stored, ${report.repeated} repeated`,
        about.length ? el("span", "file-about", ` (${about.join(", ")})`) : ""
      );
      if (report.notes && report.notes.length) {
        const notes = el("ul", "file-notes");
        for (const note of report.notes) notes.append(el("li", "", note));
        item.append(notes);
      }
      list.append(item);
    }
  }

  async function upload(event) {
    event.preventDefault();
    const input = byId("files");
    const status = byId("upload-status");
    byId("upload-report").replaceChildren();
    if (!input.files.length) {
      status.className = "status failed";
      status.textContent = "Choose one or more text files first.";
      return;
    }
    const form = new FormData();
    for (const file of input.files) form.append("files", file, file.name);
    const button = byId("upload-button");
    button.disabled = true;
    status.className = "status";
    status.textContent = "Indexing…";
    try {
      const result = await call("file-upload", { method: "POST", body: form });
      status.textContent =
        `Added ${plural(result.documents_added, "passage")} from ${result.files.join(", ")}; ` +
        `${result.documents_total} in the store.`;
      renderFileReports(result.file_reports);
      input.value = "";
      refreshStore();
    } catch (error) {
      status.className = "status failed";
      status.textContent = `Upload failed: ${error.message}`;
    } finally {
      button.disabled = false;
    }
  }

  byId("ask").addEventListener("submit", ask);
  byId("upload").addEventListener("submit", upload);
  refreshStore();
})();
