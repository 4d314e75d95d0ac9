// twice dashboard: live refresh. Pages work without this script; with it,
// the main area is re-fetched every data-refresh milliseconds, unless the
// operator is typing in a form, has ticked a box, or the tab is hidden.
(function () {
  "use strict";
  var every = Number(document.body.dataset.refresh || 0);
  if (!every || !window.fetch || !window.DOMParser) return;
  function busy() {
    var a = document.activeElement;
    if (a && (a.tagName === "INPUT" || a.tagName === "SELECT" || a.tagName === "TEXTAREA")) return true;
    var inputs = document.querySelectorAll("main input:not([type=hidden])");
    for (var i = 0; i < inputs.length; i++) {
      var el = inputs[i];
      if (el.type === "checkbox" || el.type === "radio" ? el.checked : el.value) return true;
    }
    return document.hidden;
  }
  function refresh() {
    if (busy()) return;
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Twice-Refresh": "1" } })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var next = doc.getElementById("main"), cur = document.getElementById("main");
        if (next && cur && !busy()) cur.replaceWith(next);
      })
      .catch(function () {
        var live = document.getElementById("live");
        if (live) live.textContent = "offline: retrying";
      });
  }
  setInterval(refresh, every);
})();

// The jobs page's select-all box ticks every row's box, and unticking a
// row unticks it. Without this script the box still works: the form then
// sends it, and the server takes every job the page listed.
document.addEventListener("change", function (ev) {
  "use strict";
  var box = ev.target;
  if (!box.form || box.type !== "checkbox") return;
  var all = box.form.querySelector("input[data-select-all]");
  if (!all) return;
  if (box === all) {
    var rows = box.form.querySelectorAll('input[type=checkbox][name="id"]');
    for (var i = 0; i < rows.length; i++) rows[i].checked = all.checked;
  } else if (box.name === "id" && !box.checked) {
    all.checked = false;
  }
});
