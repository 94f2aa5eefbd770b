// The job page's player for a ladder job's HLS package (farm.web.jobpage): hls.js, vendored
// beside this file (hls.min.js, v1.7.4, Apache-2.0: hls.js.LICENSE), no CDN. What it found is left
// on the <video> element's data attributes (levels, level, played, height, error) for the browser test to read.
(function () {
  "use strict";
  var video = document.getElementById("ladder");
  if (!video) {
    return;
  }
  var source = video.getAttribute("data-src");
  var shown = document.getElementById("ladder-error");
  function stopped(why, hint) {
    // Said on the page, where the user looks, and kept for the browser test.
    video.dataset.error = why;
    if (shown) {
      shown.textContent = hint + " (" + why + ")";
      shown.hidden = false;
    }
  }
  video.addEventListener("timeupdate", function () {
    video.dataset.played = video.currentTime.toFixed(2);
    video.dataset.height = String(video.videoHeight);
  });
  if (window.Hls && window.Hls.isSupported()) {
    var hls = new window.Hls({ enableWorker: false });
    hls.on(window.Hls.Events.MANIFEST_PARSED, function (_event, data) {
      video.dataset.levels = data.levels.map(function (l) { return l.width + "x" + l.height; }).join(",");
      if (window.location.hash === "#play") {
        video.play(); // a link to the page that starts the stream (muted, so browsers allow it)
      }
    });
    hls.on(window.Hls.Events.LEVEL_SWITCHED, function (_event, data) {
      var level = hls.levels[data.level];
      video.dataset.level = level ? level.width + "x" + level.height : "";
    });
    hls.on(window.Hls.Events.ERROR, function (_event, data) {
      if (data.fatal) {
        var codecs = /codec|bufferAddCodecError|bufferAppendError/i.test(data.details);
        stopped(data.type + ": " + data.details, codecs
          ? "This browser cannot decode these renditions (" + video.getAttribute("data-codecs") +
            "): play them in a player that can (Safari, mpv), or fetch the package"
          : "The player stopped: reload the page, or fetch the package");
      }
    });
    hls.loadSource(source);
    hls.attachMedia(video);
  } else if (video.canPlayType("application/vnd.apple.mpegurl")) {
    video.src = source; // Safari plays HLS itself
  } else {
    stopped("this browser plays neither HLS nor Media Source Extensions",
      "This browser cannot play the stream here: fetch the package");
  }
})();
