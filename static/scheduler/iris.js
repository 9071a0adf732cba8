// A followed log keeps to its end: each refresh scrolls the log to its last line, unless the
// reader had scrolled up to read it, then it stays where they were.
(function () {
  let atEnd = true;
  const nearEnd = (pre) => pre.scrollHeight - pre.scrollTop - pre.clientHeight < 8;
  document.addEventListener("htmx:beforeSwap", (event) => {
    const pre = document.getElementById("log-text");
    if (pre && event.detail.target.id === "log") atEnd = nearEnd(pre);
  });
  htmx.onLoad((elt) => {
    const pre = elt.id === "log-text" ? elt : elt.querySelector && elt.querySelector("#log-text");
    if (pre && atEnd) pre.scrollTop = pre.scrollHeight;
  });
})();
