// The Lakeshore dashboard. One snapshot request per second (GET /v1/namespaces/{ns}/dashboard),
// plus the selected invocation's row and new frames while a drill-down is open. The token lives
// in sessionStorage: pasted once per tab, gone when the tab closes. Everything from the server
// is written with textContent, never as HTML.
"use strict";

(function () {
  const POLL_MS = 1000;
  const STATES = [
    "waiting", "scheduled", "queued", "running", "succeeded", "failed", "cancelled", "killed",
    "timeout",
  ];
  const store = window.sessionStorage;
  const $ = (sel) => document.querySelector(sel);

  let token = store.getItem("lakeshore.token");
  let ns = store.getItem("lakeshore.ns");
  let selected = null; // {id, since, ended}
  let pendingById = {}; // why each recent queued job waits, in the server's words
  let lastOk = 0;
  let timer = null;

  // -- helpers --------------------------------------------------------------------------------

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k === "dataset") Object.assign(node.dataset, v);
      else node.setAttribute(k, v);
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function span(seconds) {
    if (seconds === null || seconds === undefined) return "–";
    if (seconds < 1) return Math.round(seconds * 1000) + "ms";
    if (seconds < 120) return seconds.toFixed(1) + "s";
    if (seconds < 7200) return (seconds / 60).toFixed(1) + "m";
    return (seconds / 3600).toFixed(1) + "h";
  }

  function clock(ts) {
    return ts ? new Date(ts * 1000).toLocaleTimeString() : "–";
  }

  function stateCell(state) {
    return el("td", { class: "state " + state }, state);
  }

  class AuthError extends Error {}

  async function api(path) {
    const response = await fetch(path, {
      headers: { authorization: "Bearer " + token, accept: "application/json" },
    });
    const body = await response.json().catch(() => null);
    if (response.status === 401) throw new AuthError(body?.error?.message || "unauthorized");
    if (!response.ok) throw new Error(body?.error?.message || "HTTP " + response.status);
    return body;
  }

  const nsPath = (p) => "/v1/namespaces/" + encodeURIComponent(ns) + p;

  // -- sparklines -----------------------------------------------------------------------------

  function sparkline(values, color, label) {
    const w = 120, h = 28, pad = 2;
    const svgNS = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(svgNS, "svg");
    svg.setAttribute("width", w);
    svg.setAttribute("height", h);
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", label);
    const nums = values.map((v) => (v === null ? null : Number(v)));
    const max = Math.max(1e-9, ...nums.filter((v) => v !== null));
    const step = (w - 2 * pad) / Math.max(1, nums.length - 1);
    let d = "";
    let pen = false;
    nums.forEach((v, i) => {
      if (v === null) { pen = false; return; }
      const x = pad + i * step;
      const y = h - pad - (v / max) * (h - 2 * pad);
      d += (pen ? "L" : "M") + x.toFixed(1) + " " + y.toFixed(1) + " ";
      pen = true;
    });
    const path = document.createElementNS(svgNS, "path");
    path.setAttribute("d", d.trim() || "M0 " + (h - pad) + " L" + w + " " + (h - pad));
    path.setAttribute("fill", "none");
    path.setAttribute("stroke", d ? color : "#c5cbd6");
    path.setAttribute("stroke-width", "1.5");
    svg.append(path);
    // A point with no neighbour draws no line: mark it, so one completion is still visible.
    nums.forEach((v, i) => {
      const alone = v !== null && (i === 0 || nums[i - 1] === null) &&
        (i === nums.length - 1 || nums[i + 1] === null);
      if (!alone) return;
      const dot = document.createElementNS(svgNS, "circle");
      dot.setAttribute("cx", (pad + i * step).toFixed(1));
      dot.setAttribute("cy", (h - pad - (v / max) * (h - 2 * pad)).toFixed(1));
      dot.setAttribute("r", "2");
      dot.setAttribute("fill", color);
      svg.append(dot);
    });
    return svg;
  }

  // -- rendering ------------------------------------------------------------------------------

  // Of a queue's queued jobs: those no daemon could ever run, those that wait for a launch
  // (as `lakeshore status` counts them; the server sweeps them into `pending`).
  const COUNTED = [
    ["unschedulable", "can never run"], ["waiting_for_capacity", "waiting for capacity"],
  ];

  function pendingCell(q) {
    const cell = el("td", { class: "pending-cell" });
    for (const [reason, words] of COUNTED) {
      const n = (q.pending || {})[reason] || 0;
      cell.append(el("span", {
        class: "reason " + reason + (n ? "" : " zero"), title: reason, dataset: { reason: reason },
      }, el("b", {}, n), " " + words));
    }
    return cell;
  }

  function renderQueues(snapshot) {
    const body = $("#queues tbody");
    const rows = snapshot.queues.map((q) => {
      const depth = el("td", { class: "depth-cell" });
      for (const s of STATES) {
        const n = q.depth[s] || 0;
        depth.append(el("span", {
          class: "depth " + s + (n ? "" : " zero"), title: s, dataset: { state: s },
        }, n));
      }
      const w = q.window;
      const perS = w.throughput_per_s;
      const throughput = el("td", {}, el("div", { class: "spark" },
        sparkline(q.completed, "#1a8a4a", "completions per bucket"),
        el("span", { class: "figure" }, w.completed + " done · " + perS.toFixed(2) + "/s")));
      const latency = el("td", {}, el("div", { class: "spark" },
        sparkline(q.latency_p50, "#0a74c9", "p50 latency per bucket"),
        el("span", { class: "figure" },
          "p50 " + span(w.latency_p50) + " · p95 " + span(w.latency_p95))));
      return el("tr", { dataset: { queue: q.name } },
        el("td", { class: "mono" }, q.name),
        el("td", {}, q.kind),
        el("td", {}, q.state),
        depth,
        pendingCell(q),
        el("td", {}, q.members + " / " + q.slots),
        throughput,
        latency);
    });
    body.replaceChildren(...rows);
  }

  const OPEN = ["running", "queued", "scheduled", "waiting"];

  function renderMaps(snapshot) {
    const rows = [];
    for (const q of snapshot.queues) {
      for (const m of q.maps || []) {
        const states = m.states || {};
        let ended = 0;
        for (const [state, n] of Object.entries(states)) if (!OPEN.includes(state)) ended += n;
        const share = m.jobs ? ended / m.jobs : 0;
        const bar = el("progress", { max: m.jobs || 1, value: ended, title: Math.round(share * 100) + "%" });
        rows.push(el("tr", { dataset: { map: m.map_id } },
          el("td", { class: "mono" }, m.map_id),
          el("td", { class: "mono" }, q.name),
          el("td", { class: "ended" }, ended + " / " + m.jobs),
          el("td", {}, bar),
          el("td", {}, states.failed || 0),
          el("td", {}, states.cancelled || 0),
          el("td", {}, states.running || 0),
          el("td", {}, (states.queued || 0) + (states.scheduled || 0) + (states.waiting || 0))));
      }
    }
    $("#maps tbody").replaceChildren(...rows);
    $("#maps-section").hidden = rows.length === 0;
  }

  function when(ts, now) {
    if (!ts) return "–";
    const delta = ts - now;
    const rel = delta >= 0 ? "in " + span(delta) : span(-delta) + " ago";
    return new Date(ts * 1000).toLocaleString() + " (" + rel + ")";
  }

  function renderSchedules(snapshot) {
    const now = snapshot.now;
    const rows = (snapshot.schedules || []).map((s) => el("tr", { dataset: { schedule: s.name } },
      el("td", { class: "mono" }, s.name),
      el("td", { class: "mono" }, s.cron),
      el("td", {}, s.tz),
      el("td", { class: "mono" }, s.queue),
      stateCell(s.state),
      el("td", { class: "next" }, s.state === "active" ? when(s.next_fire_at, now) : "–"),
      el("td", {}, when(s.last_fired_at, now)),
      el("td", { class: "missed", title: s.last_error || "" }, s.missed)));
    $("#schedules tbody").replaceChildren(...rows);
    $("#schedules-section").hidden = rows.length === 0;
  }

  function gpuCell(w) {
    const gpus = w.gpus || [];
    if (!gpus.length) return el("td", {}, "–");
    const used = w.gpus_used || {};
    let total = 0;
    const each = gpus.map((g) => {
      const share = used[String(g.index)] || 0;
      total += share;
      return "gpu" + g.index + " " + (g.name || "") + ": " + Math.round(share * 100) + "% in use";
    });
    let figure = (Math.round(total * 100) / 100) + " / " + gpus.length + " × " + (gpus[0].name || "GPU");
    // GPUs the daemon took out of its offer (NVML said they failed), from its heartbeat.
    const failed = (w.load || {}).gpus_failed || [];
    if (failed.length) {
      figure += " · " + failed.length + " failed";
      each.push(...failed.map((g) => "gpu" + g.index + " failed: " + g.reason));
    }
    return el("td", { class: "gpus", title: each.join("\n") }, figure);
  }

  function renderWorkers(snapshot) {
    const rows = snapshot.workers.map((w) => {
      const hb = el("td", { class: w.stale ? "stale-hb" : "" }, span(w.heartbeat_age_s) + " ago");
      return el("tr", { dataset: { worker: w.name } },
        el("td", { class: "mono" }, w.name),
        el("td", {}, w.host || ""),
        stateCell(w.state),
        el("td", {}, (w.queues.length ? w.queues : ["(default)"]).join(", ")),
        el("td", {}, w.busy + " / " + w.slots),
        gpuCell(w),
        hb);
    });
    $("#workers tbody").replaceChildren(...rows);
    $("#no-workers").hidden = rows.length > 0;
  }

  // A queued job's state, tagged with why it waits when the store says (the full words go on
  // the line under the row, as `lakeshore jobs show` prints them).
  function recentState(inv) {
    const cell = stateCell(inv.state);
    if (inv.pending_label) {
      const kind = (inv.pending_reason || "").split(":")[0];
      cell.append(" ", el("span", { class: "why-tag " + kind }, inv.pending_label));
    }
    return cell;
  }

  function renderRecent(snapshot) {
    const now = snapshot.now;
    pendingById = {};
    const rows = snapshot.recent.flatMap((inv) => {
      const end = inv.finished_at || now;
      if (inv.pending) pendingById[inv.id] = inv.pending;
      const tr = el("tr", { class: "clickable", dataset: { id: inv.id } },
        el("td", { class: "id" }, inv.id),
        el("td", {}, inv.queue),
        recentState(inv),
        el("td", {}, inv.attempt + "/" + inv.max_attempts),
        el("td", {}, inv.worker || ""),
        el("td", {}, span(now - inv.created_at)),
        el("td", {}, inv.started_at ? span(end - inv.started_at) : "–"));
      const out = [tr];
      if (inv.pending) {
        tr.classList.add("has-why");
        out.push(el("tr", { class: "clickable why", dataset: { why: inv.id } },
          el("td", { colspan: "7" }, inv.pending)));
      }
      for (const row of out) {
        if (selected && selected.id === inv.id) row.classList.add("selected");
        row.addEventListener("click", () => select(inv.id));
      }
      return out;
    });
    $("#recent tbody").replaceChildren(...rows);
  }

  function renderEvents(snapshot) {
    const rows = snapshot.events.map((e) => {
      const detail = Object.entries(e.detail || {})
        .map(([k, v]) => k + "=" + (typeof v === "object" ? JSON.stringify(v) : v)).join(" ");
      return el("tr", { dataset: { kind: e.kind } },
        el("td", {}, clock(e.at)),
        el("td", { class: "mono" }, e.queue),
        el("td", {}, e.kind),
        el("td", { class: "muted" }, detail));
    });
    $("#events tbody").replaceChildren(...rows);
  }

  // -- drill-down -----------------------------------------------------------------------------

  function select(id, rank) {
    selected = { id: id, since: -1, ended: false, rank: rank || 0 };
    $("#frames").replaceChildren();
    $("#detail").hidden = false;
    $("#detail-id").textContent = id;
    refreshDetail();
  }

  function frameText(frame) {
    if (frame.value === null || frame.value === undefined) return frame.kind;
    try {
      const value = window.lakeshoreMsgpack.decode(window.lakeshoreMsgpack.fromBase64(frame.value));
      return typeof value === "string" ? value : JSON.stringify(value);
    } catch (err) {
      return "<undecodable: " + err.message + ">";
    }
  }

  // What the job brought to its worker (issue 46): its bundle's digest and what shipped.
  function runtimeFields(rt) {
    const out = [];
    if (rt.bundle) out.push(["bundle", rt.bundle.slice(0, 19) + " (" + rt.files + " files, " +
      rt.bytes + " B)"]);
    if (rt.sources && rt.sources.length) out.push(["shipped", rt.sources.join(", ")]);
    if (rt.workdir) out.push(["workdir", "shipped"]);
    if (rt.requirements && rt.requirements.length) out.push(["requires", rt.requirements.join(" ")]);
    return out;
  }

  // A job of several nodes (issue 47): its newest attempt's parts, and whose frames to show.
  function gangFields(gang) {
    const parts = (gang.parts || []).map((p) => p.rank + ": " + p.worker + " " + p.state);
    const out = [["parts", parts.join(", ") || "none held"]];
    if (gang.failed) {
      out.push(["failed first", "rank " + gang.failed.rank + " on " + gang.failed.worker +
        (gang.failed.why ? ": " + gang.failed.why : "")]);
    }
    return out;
  }

  function showRanks(inv, current) {
    const nodes = inv.nodes || 1;
    const pick = $("#detail-rank");
    $("#detail-rank-pick").hidden = nodes < 2;
    if (nodes < 2) return;
    if (pick.options.length !== nodes) {
      pick.replaceChildren(...Array.from({ length: nodes }, (_, r) =>
        el("option", { value: String(r) }, String(r))));
    }
    pick.value = String(current.rank);
  }

  async function refreshDetail() {
    if (!selected) return;
    const current = selected;
    const inv = await api(nsPath("/invocations/" + encodeURIComponent(current.id)));
    if (selected !== current) return;
    const fields = [
      ["queue", inv.queue], ["state", inv.state],
      ...(inv.state === "queued" && pendingById[inv.id] ? [["pending", pendingById[inv.id]]] : []),
      ...(inv.after && inv.after.length ? [["after", inv.after.join(" ")]] : []),
      ["attempt", inv.attempt + " of " + inv.max_attempts], ["worker", inv.worker || "–"],
      ["submitted", clock(inv.created_at)], ["started", clock(inv.started_at)],
      ["finished", clock(inv.finished_at)],
      ["queued for", inv.started_at ? span(inv.started_at - inv.created_at) : "–"],
      ["ran for", inv.started_at && inv.finished_at ? span(inv.finished_at - inv.started_at) : "–"],
      ...(inv.runtime ? runtimeFields(inv.runtime) : []),
      ...(inv.gang ? gangFields(inv.gang) : []),
    ];
    showRanks(inv, current);
    $("#detail-fields").replaceChildren(...fields.flatMap(([k, v]) => [
      el("dt", {}, k), el("dd", k === "state" ? { class: "state " + v } : {}, v),
    ]));
    const error = $("#detail-error");
    error.hidden = !inv.error || inv.state === "succeeded";
    error.textContent = inv.error || "";
    if (!current.ended) {
      const page = await api(nsPath("/invocations/" + encodeURIComponent(current.id) +
        "/frames?since=" + current.since + (current.rank ? "&rank=" + current.rank : "")));
      if (selected !== current) return;
      const list = $("#frames");
      for (const frame of page.frames) {
        list.append(el("li", { class: frame.kind, value: frame.seq }, frameText(frame)));
        current.since = frame.seq;
      }
      current.ended = page.ended && page.frames.length === 0 &&
        ["succeeded", "failed", "cancelled", "killed", "timeout"].includes(inv.state);
    }
    $("#no-frames").hidden = $("#frames").children.length > 0;
  }

  // -- the loop -------------------------------------------------------------------------------

  function showLogin(message) {
    $("#main").hidden = true;
    $("#logout").hidden = true;
    $("#login").hidden = false;
    $("#login-error").textContent = message || "";
    $("#live").textContent = "";
  }

  async function tick() {
    clearTimeout(timer);
    try {
      const snapshot = await api(nsPath("/dashboard"));
      renderQueues(snapshot);
      renderMaps(snapshot);
      renderSchedules(snapshot);
      renderWorkers(snapshot);
      renderRecent(snapshot);
      renderEvents(snapshot);
      await refreshDetail();
      lastOk = Date.now();
      $("#error").hidden = true;
      document.body.dataset.updated = String(lastOk);
    } catch (err) {
      if (err instanceof AuthError) {
        store.removeItem("lakeshore.token");
        token = null;
        showLogin("The server refused the token: " + err.message);
        return;
      }
      $("#error").hidden = false;
      $("#error").textContent = "Update failed: " + err.message + " (retrying)";
    }
    timer = setTimeout(tick, POLL_MS);
  }

  function liveness() {
    const live = $("#live");
    if (!lastOk) return;
    const age = (Date.now() - lastOk) / 1000;
    live.className = "live " + (age < 3 ? "ok" : "stale");
    live.textContent = age < 3 ? "live" : "last update " + span(age) + " ago";
  }

  function start() {
    $("#login").hidden = true;
    $("#main").hidden = false;
    $("#logout").hidden = false;
    $("#namespace").textContent = ns;
    tick();
  }

  $("#login-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    token = $("#token").value.trim();
    const wanted = $("#ns").value.trim();
    try {
      const me = await api("/v1/whoami");
      ns = wanted || me.namespace;
    } catch (err) {
      showLogin(err instanceof AuthError ? "Unknown token." : err.message);
      return;
    }
    store.setItem("lakeshore.token", token);
    store.setItem("lakeshore.ns", ns);
    $("#token").value = "";
    start();
  });

  $("#logout").addEventListener("click", () => {
    store.removeItem("lakeshore.token");
    store.removeItem("lakeshore.ns");
    token = null;
    clearTimeout(timer);
    showLogin("");
  });

  $("#detail-rank").addEventListener("change", (event) => {
    if (selected) select(selected.id, Number(event.target.value));
  });

  $("#detail-close").addEventListener("click", () => {
    selected = null;
    $("#detail").hidden = true;
    document.querySelectorAll("#recent tr.selected").forEach((tr) => tr.classList.remove("selected"));
  });

  setInterval(liveness, 500);
  const params = new URLSearchParams(window.location.search);
  if (params.get("ns")) ns = params.get("ns");
  if (token && ns) start();
  else showLogin("");
})();
