// Trawl console: live values over server-sent events, and the retry form without a reload.
// Loaded from /console/static (the Content-Security-Policy allows no inline script).
(function () {
  "use strict";
  var feed = document.body.getAttribute("data-live-feed");
  var state = document.getElementById("live-state");
  function say(text) { if (state) { state.textContent = text; } }

  function apply(values) {
    var nodes = document.querySelectorAll("[data-live]");
    for (var i = 0; i < nodes.length; i++) {
      var node = nodes[i];
      var key = node.getAttribute("data-live");
      if (!Object.prototype.hasOwnProperty.call(values, key)) { continue; }
      var value = values[key];
      if (node.tagName === "PROGRESS") {
        if (node.getAttribute("value") !== value) { node.setAttribute("value", value); }
      } else if (node.textContent !== value) {
        node.textContent = value;
      }
    }
  }

  if (feed && window.EventSource) {
    var source = new EventSource(feed);
    source.addEventListener("open", function () { say("live"); });
    source.addEventListener("values", function (event) {
      apply(JSON.parse(event.data));
      say("live · updated " + new Date().toLocaleTimeString());
    });
    source.addEventListener("signedout", function () {
      source.close();
      say("signed out: reload to sign in again");
    });
    source.addEventListener("error", function () { say("reconnecting…"); });
  }

  var forms = document.querySelectorAll("form.retry");
  for (var i = 0; i < forms.length; i++) {
    forms[i].addEventListener("submit", function (event) {
      event.preventDefault();
      var form = event.target;
      var button = form.querySelector("button");
      button.disabled = true;
      fetch(form.action, {
        method: "POST", body: new FormData(form), credentials: "same-origin",
        headers: { "Accept": "application/json" }
      }).then(function (response) {
        say(response.ok ? "retry requested: the count updates when the operator requeues them"
                        : "retry refused (" + response.status + ")");
      }).catch(function () { say("retry failed: the console is unreachable"); })
        .then(function () { button.disabled = false; });
    });
  }
})();
