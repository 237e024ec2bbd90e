// Sundial admin UI: say so when a refresh or an action gets no answer,
// instead of leaving stale numbers that look current. Loaded after htmx;
// the pages work without it.
(function () {
  function banner() {
    var b = document.getElementById("offline");
    if (!b) {
      b = document.createElement("p");
      b.id = "offline";
      b.className = "error";
      b.setAttribute("role", "alert");
      var main = document.getElementById("main");
      main.insertBefore(b, main.firstChild);
    }
    return b;
  }
  document.addEventListener("htmx:sendError", function () {
    banner().textContent = "The proxy did not answer (last tried " + new Date().toLocaleTimeString() +
      "); the data below may be out of date. Retrying.";
  });
  document.addEventListener("htmx:afterSwap", function () {
    var b = document.getElementById("offline");
    if (b) { b.remove(); }
  });
})();
