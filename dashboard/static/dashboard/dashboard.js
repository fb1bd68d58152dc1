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
  document.addEventListener("htmx:afterRequest", function (event) {
    var target = region(event.detail.elt);
    if (target && event.detail.successful && target.classList.contains("is-error")) {
      target.classList.remove("is-error");
      target.textContent = "Live updates resumed.";
    }
  });
})();
