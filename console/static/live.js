// Keeps a session's timeline live: listens to the console's server-sent events and appends each
// new event's row, which the console rendered and escaped; updates the status shown. Served by the
// console itself (Content-Security-Policy script-src 'self'), pinned by its integrity hash.
(function () {
  "use strict";
  var rows = document.querySelector("tbody[data-live]");
  if (!rows || !window.EventSource) {
    return;
  }
  var note = document.getElementById("live-note");
  var source = new EventSource(rows.getAttribute("data-live"));
  source.addEventListener("row", function (message) {
    if (document.getElementById("e" + message.lastEventId)) {
      return;
    }
    rows.insertAdjacentHTML("beforeend", message.data);
    if (note) {
      note.textContent = "Event " + message.lastEventId + " arrived.";
    }
  });
  // The login ended (or stopped seeing the session): stop listening, and say so.
  source.addEventListener("ended", function (message) {
    source.close();
    if (note) {
      note.textContent = "Live updates stopped: " + message.data + ".";
    }
  });
  // A reconnection the console refused (a login gone since) closes the source for good.
  source.addEventListener("error", function () {
    if (source.readyState === EventSource.CLOSED && note) {
      note.textContent = "Live updates stopped: reload the page to see new events.";
    }
  });
  source.addEventListener("status", function (message) {
    var status = document.getElementById("session-status");
    if (status) {
      status.textContent = message.data;
    }
  });
})();
