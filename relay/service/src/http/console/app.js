// The console's only script (served as /console/app.js; the pages' CSP allows no other).
// Every page works without it: it refreshes the runs and task lists in place, and keeps an
// assignment's idempotency key while the goal text is unchanged.
"use strict";

// Replaces the contents of every element with data-src every data-refresh-ms milliseconds,
// leaving the rest of the page (scroll position, forms being filled in) alone.
function refreshLists() {
  document.querySelectorAll("[data-src][data-refresh-ms]").forEach(function (list) {
    var every = Number(list.getAttribute("data-refresh-ms"));
    if (!(every > 0)) {
      return;
    }
    var busy = false;
    setInterval(function () {
      if (busy || document.hidden) {
        return;
      }
      busy = true;
      fetch(list.getAttribute("data-src"), { credentials: "same-origin", cache: "no-store" })
        .then(function (response) {
          // Only a list fragment replaces the list: a lapsed session answers with the
          // sign-in page, which must not land inside it.
          if (!response.ok || response.headers.get("X-Console-Fragment") !== "1") {
            throw new Error("refresh answered " + response.status);
          }
          return response.text();
        })
        .then(function (html) {
          list.innerHTML = html;
        })
        .catch(function () {})
        .then(function () {
          busy = false;
        });
    }, every);
  });
}

// One key per goal text: a double click or a resubmit of the same goal sends the same key
// (one task); a changed goal gets a new one.
function keepIdempotencyKey() {
  var form = document.getElementById("assign");
  if (!form || !window.crypto || !crypto.randomUUID) {
    return;
  }
  var goal = form.querySelector("textarea[name=goal]");
  var key = form.querySelector("input[name=idempotency_key]");
  var keyedGoal = null;
  function keyFor() {
    if (goal.value !== keyedGoal) {
      keyedGoal = goal.value;
      key.value = crypto.randomUUID();
    }
  }
  goal.addEventListener("input", keyFor);
  form.addEventListener("submit", keyFor);
  keyFor();
}

document.addEventListener("DOMContentLoaded", function () {
  refreshLists();
  keepIdempotencyKey();
});
