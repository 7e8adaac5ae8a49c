/*! adfunnel ad tag (GET /tag.js). One <script async src="https://ADS/tag.js"> per page;
 * placeholders are <div data-adf-placement="ID">. README "Put ads on your site" lists the
 * attributes, CSS hooks and events. No framework, no eval, no inline styles: it runs
 * under a Content-Security-Policy that allows the ad server's origin. */
(function (w, d) {
  "use strict";
  var api = w.adfunnel = w.adfunnel || {};  // a page may set {user, server} before the tag
  if (api.version) { return; }  // included twice: the first copy serves the page
  api.version = "1";
  api.errors = 0;

  var MAX_SLOTS = 10;  // the server's default max_slots: larger batches are split
  var LARGE_AD_PX = 242500;  // MRC display: ads this large are viewable at 30 %
  var VIEW_MS = 1000;  // MRC display: one continuous second in view
  var STATE = "data-adf-state";
  var me = d.currentScript;
  var base = "";
  // placement id -> slots asked so far (a feed's later slots rank lower); no prototype, so
  // a placement named "constructor" or "__proto__" counts from 0 like any other
  var positions = Object.create(null);
  var serial = 0;
  var scanQueued = false;
  var memoryUser = null;
  // the server's time for a decision (its own default when unset): <script data-adf-deadline-ms>
  var deadlineMs = parseInt((me && me.getAttribute("data-adf-deadline-ms")) || api.deadlineMs, 10);

  function fail(e) {
    api.errors += 1;
    try { w.console && w.console.warn("adfunnel:", e); } catch (ignored) { /* nothing */ }
  }

  function guard(fn) {
    return function () {
      try { return fn.apply(this, arguments); } catch (e) { fail(e); }
    };
  }

  // An http(s) URL as an absolute string, or null: nothing else goes into src or href.
  function safeUrl(u) {
    if (typeof u !== "string" || !u) { return null; }
    try {
      var url = new URL(u, base || w.location.href);
      return url.protocol === "https:" || url.protocol === "http:" ? url.href : null;
    } catch (e) { return null; }
  }

  function randomId() {
    var bytes = new Uint8Array(16);
    w.crypto.getRandomValues(bytes);
    var out = "";
    for (var i = 0; i < bytes.length; i++) { out += (bytes[i] + 256).toString(16).slice(1); }
    return out;
  }

  // The user key: the placeholder's or the page's own, else a random first-party id kept
  // in this site's localStorage (or in memory for this page, where storage is refused).
  function userKey(el) {
    var own = el.getAttribute("data-adf-user") || api.user;
    if (own) { return String(own).slice(0, 256); }
    try {
      var kept = w.localStorage.getItem("adfunnel.user");
      if (!kept) {
        kept = randomId();
        w.localStorage.setItem("adfunnel.user", kept);
      }
      return kept;
    } catch (e) {
      memoryUser = memoryUser || randomId();
      return memoryUser;
    }
  }

  function languages() {
    var lang = String(w.navigator.language || "").toLowerCase();
    if (!lang) { return null; }
    var primary = lang.split("-")[0];
    return primary && primary !== lang ? [lang, primary] : [lang];
  }

  function intAttr(el, name, fallback) {
    var n = parseInt(el.getAttribute(name), 10);
    return n > 0 ? n : Math.round(fallback || 0);
  }

  function mark(el, state) {
    el.setAttribute(STATE, state);
    if (state === "filled" || state === "empty") { el.classList.add("adf-" + state); }
  }

  function emit(el, name, detail) {
    try {
      el.dispatchEvent(new w.CustomEvent("adfunnel:" + name, {bubbles: true, detail: detail}));
    } catch (e) { fail(e); }
  }

  function beacon(url) {
    url = safeUrl(url);
    if (!url) { return; }
    if (w.fetch) {
      // keepalive: a beacon of the last second on the page still leaves when it unloads
      w.fetch(url, {keepalive: true, credentials: "omit", mode: "cors", cache: "no-store"})
        .catch(fail);
    } else {
      new w.Image().src = url;
    }
  }

  function node(tag, cls, text) {
    var el = d.createElement(tag);
    if (cls) { el.className = cls; }
    if (text != null) { el.textContent = String(text); }
    return el;
  }

  function img(cls, src, alt, width, height) {
    var im = node("img", cls);
    im.setAttribute("src", src);
    im.setAttribute("alt", alt || "");
    if (width) { im.setAttribute("width", String(width)); }
    if (height) { im.setAttribute("height", String(height)); }
    return im;
  }

  function link(kind, click) {
    var a = node("a", "adf-ad adf-ad-" + kind);
    a.setAttribute("href", click);
    a.setAttribute("rel", "sponsored noopener");
    a.setAttribute("target", "_blank");
    return a;
  }

  // The ad's element, built from text nodes and attributes only; null when it cannot show.
  function build(ad) {
    var c = ad.creative;
    var click = safeUrl(ad.click_url);
    if (!c || typeof c !== "object" || !click) { return null; }
    var box, src;
    if (c.type === "image") {
      src = safeUrl(c.url);
      if (!src) { return null; }
      box = link("image", click);
      box.appendChild(node("span", "adf-label", "Ad"));
      box.appendChild(img("adf-image", src, c.alt, c.width || ad.width, c.height || ad.height));
    } else if (c.type === "native") {
      box = link("native", click);
      src = safeUrl(c.image_url);
      if (src) { box.appendChild(img("adf-image", src, "")); }
      src = safeUrl(c.icon_url);
      if (src) { box.appendChild(img("adf-icon", src, "")); }
      box.appendChild(node("span", "adf-label", "Sponsored"));
      box.appendChild(node("span", "adf-title", c.title));
      box.appendChild(node("span", "adf-body", c.body));
      box.appendChild(node("span", "adf-sponsor", c.sponsor));
      box.appendChild(node("span", "adf-cta", c.cta));
    } else if (c.type === "html" && ad.token) {
      // the markup comes from the ad server's /f in a sandbox without allow-same-origin:
      // an opaque origin, isolated from this page and from its CSP
      src = safeUrl(base + "/f?t=" + encodeURIComponent(ad.token));
      if (!src) { return null; }
      box = node("div", "adf-ad adf-ad-html");
      box.appendChild(node("span", "adf-label", "Ad"));
      var frame = node("iframe", "adf-frame");
      frame.setAttribute("sandbox", "allow-scripts allow-popups allow-popups-to-escape-sandbox");
      frame.setAttribute("src", src);
      frame.setAttribute("width", String(ad.width));
      frame.setAttribute("height", String(ad.height));
      frame.setAttribute("title", "Advertisement");
      frame.setAttribute("scrolling", "no");
      frame.setAttribute("frameborder", "0");
      frame.setAttribute("referrerpolicy", "no-referrer");
      box.appendChild(frame);
    } else {
      return null;
    }
    return box;
  }

  // The element whose box is the ad's pixels: the image or the html frame; for a native
  // ad (text and images) its placeholder. Never the <a> itself: unstyled, it is an inline
  // box one line of text tall on the image's baseline, not the ad.
  function measured(el, box) {
    var own = box.className.indexOf("adf-ad-native") < 0 &&
      box.querySelector("img.adf-image, iframe.adf-frame");
    return own || el;
  }

  // MRC display viewability: >= 50 % of the ad's pixels (30 % from 242,500 px) in view
  // for one continuous second while the page is visible; viewable_url fires once then.
  function watch(el, box, ad) {
    if (!ad.viewable_url || !w.IntersectionObserver) { return; }
    var threshold = ad.width * ad.height >= LARGE_AD_PX ? 0.3 : 0.5;
    var inView = false;
    var timer = null;
    var done = false;
    var io;

    function stop() {
      if (timer) { w.clearTimeout(timer); timer = null; }
    }

    var check = guard(function () {
      if (done) { return; }
      if (inView && !d.hidden) {
        if (!timer) {
          timer = w.setTimeout(guard(function () {
            timer = null;
            if (done || !inView || d.hidden) { return; }
            done = true;
            io.disconnect();
            d.removeEventListener("visibilitychange", check);
            beacon(ad.viewable_url);
            emit(el, "viewable", ad);
          }), VIEW_MS);
        }
      } else {
        stop();
      }
    });

    io = new w.IntersectionObserver(guard(function (entries) {
      var e = entries[entries.length - 1];
      inView = e.isIntersecting && e.intersectionRatio >= threshold - 0.001;
      check();
    }), {threshold: [0, threshold, 1]});
    io.observe(box);
    d.addEventListener("visibilitychange", check);
  }

  function fill(el, ad) {
    if (!d.documentElement.contains(el)) { return; }  // gone from the page: not rendered
    var box = build(ad);
    if (!box) {
      fail("ad " + ad.ad_id + ": no creative this tag can show");
      mark(el, "empty");
      return;
    }
    while (el.firstChild) { el.removeChild(el.firstChild); }
    el.appendChild(box);
    mark(el, "filled");
    beacon(ad.impression_url);  // rendered: the ad is in its placeholder
    emit(el, "rendered", ad);
    watch(el, measured(el, box), ad);
  }

  function empty(els) {
    for (var i = 0; i < els.length; i++) {
      mark(els[i], "empty");
      emit(els[i], "empty", null);
    }
  }

  function request(placement, user, els) {
    var slots = [];
    var bySlot = {};
    var keywords = [];
    for (var i = 0; i < els.length; i++) {
      var el = els[i];
      var width = intAttr(el, "data-adf-width", el.clientWidth);
      var height = intAttr(el, "data-adf-height", el.clientHeight);
      if (!(width > 0 && height > 0)) {  // one slot without a size would void the request
        fail("a placeholder of " + placement + " has no size (data-adf-width/height)");
        empty([el]);
        continue;
      }
      var id = "s" + (++serial);
      var position = positions[placement] = (positions[placement] || 0) + 1;
      bySlot[id] = el;
      slots.push({
        id: id, position: Math.min(position, 30), width: width, height: height,
        format: el.getAttribute("data-adf-format") || "banner"
      });
      var kw = (el.getAttribute("data-adf-keywords") || "").split("|");
      for (var k = 0; k < kw.length; k++) {
        var word = kw[k].trim();
        if (word && keywords.indexOf(word) < 0) { keywords.push(word); }
      }
    }
    if (!slots.length) { return; }
    var attributes = {};
    var lang = languages();
    if (lang) { attributes.language = lang; }
    if (keywords.length) { attributes.interests = keywords; }
    var body = {
      user: {key: user, attributes: attributes},
      placement: {id: placement, domain: w.location.hostname || undefined},
      slots: slots
    };
    if (deadlineMs > 0) { body.deadline_ms = deadlineMs; }
    w.fetch(base + "/v1/ads:select", {
      method: "POST", credentials: "omit", mode: "cors",
      headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)
    }).then(function (r) {
      if (r.status === 204) { return {ads: []}; }
      if (!r.ok) { throw new Error("ads:select answered " + r.status + " for " + placement); }
      return r.json();
    }).then(guard(function (answer) {
      var ads = answer && answer.ads || [];
      for (var j = 0; j < ads.length; j++) {
        var target = bySlot[ads[j].slot_id];
        if (target) {
          delete bySlot[ads[j].slot_id];
          fill(target, ads[j]);
        }
      }
      var rest = [];
      for (var s in bySlot) { if (bySlot.hasOwnProperty(s)) { rest.push(bySlot[s]); } }
      empty(rest);
    }))["catch"](function (e) {
      fail(e);
      var rest = [];
      for (var s in bySlot) {
        if (bySlot.hasOwnProperty(s) && bySlot[s].getAttribute(STATE) === "loading") {
          rest.push(bySlot[s]);
        }
      }
      empty(rest);
    });
  }

  // Every placeholder not yet asked for, batched per placement and user into requests of
  // at most MAX_SLOTS slots.
  function scan() {
    scanQueued = false;
    var found = d.querySelectorAll("[data-adf-placement]");
    var groups = {};
    var order = [];
    for (var i = 0; i < found.length; i++) {
      var el = found[i];
      if (el.hasAttribute(STATE)) { continue; }
      mark(el, "loading");
      var placement = el.getAttribute("data-adf-placement");
      if (!placement) { mark(el, "empty"); continue; }
      var user = userKey(el);
      var key = placement + "\n" + user;
      if (!groups[key]) { groups[key] = {placement: placement, user: user, els: []}; order.push(key); }
      groups[key].els.push(el);
    }
    for (var g = 0; g < order.length; g++) {
      var group = groups[order[g]];
      for (var n = 0; n < group.els.length; n += MAX_SLOTS) {
        request(group.placement, group.user, group.els.slice(n, n + MAX_SLOTS));
      }
    }
  }

  function queueScan() {
    if (!scanQueued) {
      scanQueued = true;
      w.setTimeout(guard(scan), 0);
    }
  }

  api.load = guard(scan);
  guard(function () {
    var src = api.server || (me && me.src);
    base = src ? new URL(src, w.location.href).origin : w.location.origin;
    if (w.MutationObserver) {
      new w.MutationObserver(guard(queueScan)).observe(d.documentElement,
        {childList: true, subtree: true});
    }
    if (d.readyState === "loading") {
      d.addEventListener("DOMContentLoaded", guard(scan));
    }
    scan();
  })();
})(window, document);
