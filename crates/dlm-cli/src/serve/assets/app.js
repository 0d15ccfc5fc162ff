// dlm serve: live refresh of the page's live part, and lock TTLs counting down.
// No framework, no build step; embedded in the binary.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var updated = document.getElementById("updated");
  var every = live ? parseInt(live.getAttribute("data-refresh") || "0", 10) : 0;
  var busy = false;
  var hovering = false;

  function stampTtls() {
    var now = Date.now();
    var cells = document.querySelectorAll("[data-ttl-ms]");
    for (var i = 0; i < cells.length; i++) {
      var ms = parseInt(cells[i].getAttribute("data-ttl-ms"), 10);
      cells[i].setAttribute("data-expires", String(now + ms));
    }
  }

  function human(ms) {
    if (ms <= 0) return "expired";
    var s = Math.floor(ms / 1000);
    if (s < 1) return ms + "ms";
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
    return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
  }

  function tick() {
    var now = Date.now();
    var cells = document.querySelectorAll("[data-expires]");
    for (var i = 0; i < cells.length; i++) {
      var left = parseInt(cells[i].getAttribute("data-expires"), 10) - now;
      cells[i].textContent = human(left);
      cells[i].classList.toggle("bad", left < 5000);
    }
  }

  function refresh() {
    if (busy || hovering || !live) return;
    busy = true;
    fetch(location.href, { headers: { "X-Partial": "1" }, cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html !== null) {
          live.innerHTML = html;
          stampTtls();
          tick();
          if (updated) updated.textContent = "updated " + new Date().toLocaleTimeString();
        }
      })
      .catch(function () { if (updated) updated.textContent = "offline"; })
      .then(function () { busy = false; });
  }

  // Do not swap the table under a pointer that is about to press a button.
  if (live) {
    live.addEventListener("mouseover", function (e) { hovering = !!e.target.closest("form, button"); });
    live.addEventListener("mouseleave", function () { hovering = false; });
  }
  stampTtls();
  tick();
  setInterval(tick, 250);
  if (every > 0) setInterval(refresh, every);
})();
