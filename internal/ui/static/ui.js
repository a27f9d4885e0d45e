// The dashboard's only script. Every page works without it; it adds:
// selection of many jobs at once, a confirmation before destructive
// actions, and a refresh of pages whose figures move (the overview, a job
// still pending or running), skipped while the user is choosing something.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const bulk = document.getElementById("bulk");
  if (bulk) {
    const boxes = () => Array.from(bulk.querySelectorAll('input[type=checkbox][name=id]'));
    const all = bulk.querySelector("[data-select-all]");
    const count = bulk.querySelector("[data-selected]");
    const update = () => {
      const n = boxes().filter((b) => b.checked).length;
      if (count) count.textContent = n + " selected";
      bulk.querySelectorAll("[data-needs-selection]").forEach((b) => { b.disabled = n === 0; });
      if (all) {
        all.checked = n > 0 && n === boxes().length;
        all.indeterminate = n > 0 && n < boxes().length;
      }
    };
    if (all) all.addEventListener("change", () => { boxes().forEach((b) => { b.checked = all.checked; }); update(); });
    bulk.addEventListener("change", update);
    update();
  }

  document.querySelectorAll("[data-confirm]").forEach((button) => {
    button.addEventListener("click", (event) => {
      if (!window.confirm(button.dataset.confirm)) event.preventDefault();
    });
  });

  document.querySelectorAll("[data-back]").forEach((a) => {
    a.addEventListener("click", (event) => { event.preventDefault(); history.back(); });
  });

  const seconds = parseInt(document.body.dataset.refresh, 10);
  if (seconds > 0) {
    const busy = () => document.querySelector("input[type=checkbox]:checked") !== null ||
      (document.activeElement && ["INPUT", "SELECT", "TEXTAREA"].includes(document.activeElement.tagName));
    const tick = () => {
      if (document.hidden || busy()) {
        setTimeout(tick, seconds * 1000);
        return;
      }
      window.location.replace(window.location.pathname + window.location.search);
    };
    setTimeout(tick, seconds * 1000);
  }
});
