/* Progressive enhancement only: the pages work without it. Says so when live updates stall. */
(function () {
  "use strict";
  function region(element) {
    var id = element && element.getAttribute("data-live-status");
    return id ? document.getElementById(id) : null;
  }
  function stalled(event, text) {
    var target = region(event.detail.elt);
    if (target) {
      target.classList.add("is-error");
      target.textContent = text;
    }
  }
  document.addEventListener("htmx:sendError", function (event) {
    stalled(event, "Live updates paused: the server cannot be reached. Retrying.");
  });
  document.addEventListener("htmx:responseError", function (event) {
    stalled(event, "Live updates paused: the server answered " + event.detail.xhr.status + ". Retrying.");
  });
  // The inventory's age ticks on here: a poll the server answers 204 (nothing moved) leaves
  // the body as it was, so "just now" would otherwise stay on the page for good. It counts
  // from the seconds the server wrote and the moment the text arrived, not from this
  // machine's clock, which may be off. Words as dashboard.views.age writes them.
  var UNITS = [[86400, "day"], [3600, "hour"], [60, "minute"], [1, "second"]];
  function ageText(seconds) {
    if (seconds < 2) {
      return "just now";
    }
    for (var i = 0; i < UNITS.length; i++) {
      if (seconds >= UNITS[i][0]) {
        var count = Math.floor(seconds / UNITS[i][0]);
        return count + " " + UNITS[i][1] + (count === 1 ? "" : "s") + " ago";
      }
    }
    return "";
  }
  function tickAges() {
    var now = Date.now();
    document.querySelectorAll("[data-age-seconds]").forEach(function (element) {
      if (element.ageArrivedAt === undefined) {
        element.ageArrivedAt = now;
      }
      var base = parseInt(element.getAttribute("data-age-seconds"), 10);
      if (!isNaN(base)) {
        element.textContent = ageText(base + Math.floor((now - element.ageArrivedAt) / 1000));
      }
    });
  }
  setInterval(tickAges, 1000);
  // A preemption's countdown, from the seconds the server wrote (dashboard_units.countdown's
  // words), so this machine's clock does not matter either.
  function countdownText(seconds) {
    if (seconds <= 0) {
      return "(now)";
    }
    var minutes = Math.floor(seconds / 60), rest = seconds % 60, parts = [];
    if (minutes) {
      parts.push(minutes + " minute" + (minutes === 1 ? "" : "s"));
    }
    if (rest) {
      parts.push(rest + " second" + (rest === 1 ? "" : "s"));
    }
    return "(in " + parts.join(" ") + ")";
  }
  function tickCountdowns() {
    var now = Date.now();
    document.querySelectorAll("[data-countdown-seconds]").forEach(function (element) {
      if (element.countdownArrivedAt === undefined) {
        element.countdownArrivedAt = now;
      }
      var base = parseInt(element.getAttribute("data-countdown-seconds"), 10);
      if (!isNaN(base)) {
        element.textContent = countdownText(
          base - Math.floor((now - element.countdownArrivedAt) / 1000));
      }
    });
  }
  setInterval(tickCountdowns, 1000);
  // Copy buttons are hidden in the HTML (the text beside them can be selected without
  // JavaScript) and shown here; live parts bring new ones, so clicks are caught on document.
  function showCopyButtons() {
    document.querySelectorAll("button[data-copy][hidden]").forEach(function (button) {
      button.hidden = false;
    });
  }
  showCopyButtons();
  document.addEventListener("htmx:afterSettle", showCopyButtons);
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button[data-copy]");
    var source = button && document.getElementById(button.getAttribute("data-copy"));
    if (!source) {
      return;
    }
    var status = button.parentElement.querySelector(".copy-status");
    function say(text) {
      if (status) {
        status.textContent = text;
      }
    }
    var text = source.textContent.trim();
    var selection = window.getSelection();
    var range = document.createRange();
    range.selectNodeContents(source);
    selection.removeAllRanges();
    selection.addRange(range);
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { say("Copied"); }, function () {
        say("Press Ctrl+C to copy");
      });
    } else {
      say(document.execCommand("copy") ? "Copied" : "Press Ctrl+C to copy");
    }
  });
  // A log box stays at its newest line while the reader leaves it there; one who scrolled up
  // to read older lines stays at the lines they read. The box is replaced on every refresh, so
  // the choice is kept on the region around it.
  function atEnd(box) {
    return box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
  }
  function toEnd(root) {
    root.querySelectorAll("pre[data-follow-end]").forEach(function (box) {
      box.scrollTop = box.scrollHeight;
    });
  }
  toEnd(document);
  document.addEventListener("scroll", function (event) {
    var box = event.target;
    if (box.matches && box.matches("pre[data-follow-end]") && box.parentElement) {
      box.parentElement.followEnd = atEnd(box);
    }
  }, true);
  document.addEventListener("htmx:beforeSwap", function (event) {
    var box = event.detail.target.querySelector("pre[data-follow-end]");
    event.detail.target.keptScrollTop = box ? box.scrollTop : 0;
  });
  document.addEventListener("htmx:afterSwap", function (event) {
    var target = event.detail.target;
    if (target.followEnd !== false) {
      toEnd(target);
    } else {
      target.querySelectorAll("pre[data-follow-end]").forEach(function (box) {
        box.scrollTop = target.keptScrollTop;
      });
    }
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    var target = region(event.detail.elt);
    if (target && event.detail.successful && target.classList.contains("is-error")) {
      target.classList.remove("is-error");
      target.textContent = "Live updates resumed.";
    }
  });
})();
