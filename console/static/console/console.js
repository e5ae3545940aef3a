// Sluice console: a little of our own script, no framework, no CDN.
// - [data-refresh-url]: swap the element's content for that URL's HTML every
//   [data-refresh-every] seconds (the capacity board, the alert banner), without a reload;
//   paused while the tab is hidden; a failed fetch keeps what is shown.
// - [data-copy="#id"]: copy that input's value (the new key) to the clipboard.
// - form[data-confirm]: ask before a destructive action.
(function () {
  "use strict";

  function refresh(el) {
    if (document.hidden) return;
    fetch(el.dataset.refreshUrl, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then(function (r) {
        if (r.redirected || !r.ok) throw new Error("refresh " + r.status);
        return r.text();
      })
      .then(function (html) {
        el.innerHTML = html;
        el.dataset.refreshedAt = String(Date.now());
        el.dispatchEvent(new CustomEvent("sluice:refreshed", { bubbles: true }));
      })
      .catch(function () { el.classList.add("stale"); });
  }

  function start() {
    document.querySelectorAll("[data-refresh-url]").forEach(function (el) {
      var every = Math.max(1, parseFloat(el.dataset.refreshEvery || "5")) * 1000;
      setInterval(function () { refresh(el); }, every);
    });
    document.addEventListener("click", function (event) {
      var button = event.target.closest("[data-copy]");
      if (!button) return;
      var input = document.querySelector(button.dataset.copy);
      if (!input) return;
      input.select();
      var done = function () { button.textContent = "Copied"; button.classList.add("copied"); };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(input.value).then(done, function () { document.execCommand("copy"); done(); });
      } else {
        document.execCommand("copy");
        done();
      }
    });
    document.addEventListener("submit", function (event) {
      var form = event.target;
      if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
