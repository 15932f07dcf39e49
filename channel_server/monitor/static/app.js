// The live page of a broker: reads the JSON API every 2 s and redraws. Every value from
// the service goes into the page as text (textContent, text nodes), never as HTML.
"use strict";

const REFRESH_MS = 2000;
const HISTORY = 150; // samples of rates kept per channel: 5 minutes at 2 s
const history = new Map(); // channel -> [[accepted_per_s, acked_per_s], ...]
let selected = decodeURIComponent(location.hash.slice(1)) || null;

function el(tag, cls, ...children) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  node.append(...children.map((c) => (c instanceof Node ? c : String(c ?? ""))));
  return node;
}

function row(cells, cls) {
  // cells: [value, numeric?] pairs
  return el("tr", cls, ...cells.map(([v, numeric]) => el("td", numeric ? "n" : "", v)));
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function rate(rates, key) {
  return rates ? rates[key].toFixed(1) : "–";
}

async function getJSON(path) {
  const reply = await fetch(path, { cache: "no-store", credentials: "same-origin" });
  if (!reply.ok) {
    const error = new Error(`${path}: HTTP ${reply.status}`);
    error.status = reply.status;
    error.reason = (await reply.json().catch(() => ({}))).error;
    throw error;
  }
  return reply.json();
}

function select(name) {
  selected = name;
  history.set(name, history.get(name) || []);
  location.hash = encodeURIComponent(name);
  refresh();
}

function renderChannels(rows) {
  document.getElementById("no-channels").hidden = rows.length > 0;
  if (rows.length) document.getElementById("broker").textContent = `· broker ${rows[0].broker}`;
  fill(
    document.querySelector("#channels tbody"),
    rows.map((r) => {
      const tr = row(
        [
          [r.channel], [r.kind], [r.accepted, true], [r.acked, true],
          [rate(r.rates, "accepted_per_s"), true], [rate(r.rates, "acked_per_s"), true],
          [r.backlog, true], [`${r.active_members}/${r.members}`, true],
          [r.dead_letters, true],
        ],
        r.channel === selected ? "selected" : "",
      );
      tr.dataset.channel = r.channel;
      tr.addEventListener("click", () => select(r.channel));
      return tr;
    }),
  );
  for (const r of rows) {
    const samples = history.get(r.channel) || [];
    if (r.rates) samples.push([r.rates.accepted_per_s, r.rates.acked_per_s]);
    history.set(r.channel, samples.slice(-HISTORY));
  }
}

function drawChart(samples) {
  const peak = Math.max(1, ...samples.flat());
  const points = (i) =>
    samples
      .map((s, x) => `${((x / Math.max(1, HISTORY - 1)) * 600).toFixed(1)},${(100 - (s[i] / peak) * 96).toFixed(1)}`)
      .join(" ");
  document.getElementById("chart-in").setAttribute("points", points(0));
  document.getElementById("chart-acked").setAttribute("points", points(1));
  document.getElementById("chart-peak").textContent = peak.toFixed(1);
}

const MEMBER_COLUMNS = [
  ["member", "id"], ["mode", "mode"], ["active", "active"], ["partitions", "partitions"],
  ["queued", "queued"], ["in flight", "in_flight"], ["window", "window"],
  ["delivered", "delivered"], ["pushes", "batches"], ["acked", "acked"], ["failures", "failures"],
  ["small delays", "small_delays"], ["long delays", "long_delays"], ["seen (s ago)", "seen_s_ago"],
];

function table(headers, rows, id) {
  const t = el("table", "", el("thead", "", el("tr", "", ...headers.map(([h, n]) => el("th", n ? "n" : "", h)))), el("tbody", "", ...rows));
  if (id) t.dataset.table = id;
  return t;
}

function partitionName(p) {
  return `${p.publisher_id}/${p.partition}`;
}

function renderGroup(name, group) {
  const members = group.members.map((m) => {
    const cells = MEMBER_COLUMNS.map(([, key]) =>
      key === "active" ? [m.active ? "yes" : `NO (${m.inactive_reason || "inactive"})`] : [m[key], key !== "id" && key !== "mode"],
    );
    const tr = row(cells, m.active ? "" : "inactive");
    tr.dataset.member = m.id;
    tr.dataset.active = String(m.active);
    return tr;
  });
  if (!members.length) members.push(row([["(no members)"]]));
  const owners = new Map();
  for (const p of group.partitions) {
    const owner = p.owner || "-";
    const entry = owners.get(owner) || { names: [], pending: 0, inFlight: 0 };
    entry.names.push(partitionName(p));
    entry.pending += p.pending;
    entry.inFlight += p.in_flight;
    owners.set(owner, entry);
  }
  const ownerRows = [...owners.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([owner, e]) => {
      const tr = row([[owner], [e.names.length, true], [e.pending, true], [e.inFlight, true], [e.names.sort().join(", ")]]);
      tr.dataset.owner = owner;
      return tr;
    });
  return el(
    "div", "group",
    el("h3", "", `group ${name} · backlog ${group.backlog}`),
    table(MEMBER_COLUMNS.map(([h], i) => [h, i > 2]), members, "members"),
    el("h3", "", partitionsHeading(group)),
    table([["owner"], ["partitions", true], ["pending", true], ["in flight", true], ["which"]], ownerRows, "owners"),
  );
}

function partitionsHeading(group) {
  const listed = group.partitions.length;
  const total = group.partitions_total ?? listed;
  return total > listed ? `partition owners (the ${listed} busiest of ${total} partitions)` : "partition owners";
}

function busyText(stats) {
  // why a saturated broker's latency is up: its short pushes wait to fill
  if (!stats.busy) return "";
  const pct = (share) => (100 * share).toFixed(0);
  return `; busy: short pushes wait to fill (the broker used ${pct(stats.broker_cpu_share)} % ` +
    `of a core, and the CPUs it runs on were ${pct(stats.machine_cpu_share)} % busy)`;
}

async function renderDetail(name) {
  let stats;
  try {
    stats = await getJSON(`api/channels/${encodeURIComponent(name)}`);
  } catch (error) {
    if (error.status === 404) {
      selected = null;
      document.getElementById("detail").hidden = true;
      return;
    }
    throw error;
  }
  document.getElementById("detail").hidden = false;
  document.getElementById("detail-name").textContent = name;
  const r = stats.rates;
  document.getElementById("detail-summary").textContent =
    `${stats.kind}, ids unique per ${stats.ids}: ${stats.unacked}/${stats.capacity} unacknowledged, ` +
    `${stats.accepted} accepted, ${stats.acked} acknowledged, ${stats.dead_letters} dead letters; ` +
    (r ? `${rate(r, "accepted_per_s")} ev/s in, ${rate(r, "acked_per_s")} ev/s acked over the last ${r.interval_s.toFixed(0)} s` : "rates not measured yet") +
    busyText(stats);
  drawChart(history.get(name) || []);
  document.getElementById("groups").replaceChildren(
    ...Object.entries(stats.groups).map(([g, group]) => renderGroup(g, group)),
  );
  const note = document.getElementById("dead-note");
  const tbody = document.querySelector("#dead-letters tbody");
  try {
    const letters = await getJSON(`api/channels/${encodeURIComponent(name)}/dead-letters`);
    note.textContent = letters.length ? "" : "none";
    document.getElementById("dead-letters").hidden = !letters.length;
    document.getElementById("replay-all").hidden = !letters.length;
    fill(tbody, letters.map((d) => {
      const tr = row([[d.id], [d.publisher_id], [d.partition], [d.group], [d.failures, true], [d.error]]);
      tr.lastChild.className = "error";
      const button = el("button", "", "replay");
      button.type = "button";
      button.dataset.replay = `${d.publisher_id}/${d.id}`;
      button.addEventListener("click", () => replay(name, [button.dataset.replay]));
      tr.append(el("td", "", button));
      return tr;
    }));
  } catch (error) {
    if (error.status !== 403) throw error;
    note.textContent = error.reason || "only a user with admin on this channel may see them";
    document.getElementById("dead-letters").hidden = true;
    document.getElementById("replay-all").hidden = true;
    fill(tbody, []);
  }
}

let csrf = null; // this server's token for a POST (GET api/session gives it)

async function replay(channel, ids) {
  // queue dead letters again: these uids, or all of the channel's (ids null)
  const status = document.getElementById("replay-status");
  try {
    csrf = csrf || (await getJSON("api/session")).csrf;
    const reply = await fetch(`api/channels/${encodeURIComponent(channel)}/dead-letters/replay`, {
      method: "POST",
      cache: "no-store",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
      body: JSON.stringify(ids ? { ids } : {}),
    });
    const answer = await reply.json();
    status.textContent = reply.ok
      ? `${answer.replayed} dead letter(s) of ${channel} queued again`
      : `replay refused: ${answer.error || reply.status}`;
  } catch (error) {
    status.textContent = `replay failed: ${error.message}`;
  }
  refresh();
}

document.getElementById("replay-all").addEventListener("click", () => {
  if (selected) replay(selected, null);
});

let running = false;
let again = false;

async function refresh() {
  // one refresh at a time: a click during one asks for another right after it
  if (running) {
    again = true;
    return;
  }
  running = true;
  clearTimeout(refresh.timer);
  const status = document.getElementById("updated");
  try {
    const rows = await getJSON("api/channels");
    if (!selected && rows.length) selected = rows[0].channel;
    renderChannels(rows);
    if (selected) await renderDetail(selected);
    status.textContent = `updated ${new Date().toLocaleTimeString()}`;
    status.className = "";
  } catch (error) {
    status.textContent = `not updated: ${error.message}`;
    status.className = "stale";
  } finally {
    running = false;
    refresh.timer = setTimeout(refresh, again ? 0 : REFRESH_MS);
    again = false;
  }
}

window.addEventListener("hashchange", () => {
  const name = decodeURIComponent(location.hash.slice(1));
  if (name && name !== selected) select(name);
});
refresh();
