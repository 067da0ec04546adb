// The API reference (/docs/api): loads RapiDoc from /vendor/ (never a CDN) once, and keeps
// every <rapi-doc> in the portal's theme and colours, light or dark, as the theme changes.
// It only reads the page and sets attributes the observer ignores, so it can't feed itself.
(function () {
  let loading = false;
  function load() {
    if (loading || (window.customElements && customElements.get('rapi-doc'))) return;
    loading = true;
    const s = document.createElement('script');
    s.type = 'module';
    s.src = '/vendor/rapidoc-min.js';
    document.head.appendChild(s);
  }
  function dark() {
    const t = document.documentElement.getAttribute('data-theme');
    if (t === 'dark') return true;
    if (t === 'light') return false;
    return !!(window.matchMedia && window.matchMedia('(prefers-color-scheme: dark)').matches);
  }
  // RapiDoc reads colours as hex; computed styles are rgb(…).
  function hex(rgb) {
    const m = rgb.match(/\d+(\.\d+)?/g);
    if (!m || m.length < 3) return rgb;
    return '#' + m.slice(0, 3).map(function (n) {
      return Math.round(Number(n)).toString(16).padStart(2, '0');
    }).join('');
  }
  function paint() {
    document.querySelectorAll('rapi-doc').forEach(function (el) {
      const theme = dark() ? 'dark' : 'light';
      if (el.getAttribute('theme') === theme) return;
      load();
      // The portal's colours, resolved: the card's surface, the text, a link's accent.
      const card = el.closest('.card') || document.body;
      const link = document.querySelector('main a');
      el.setAttribute('theme', theme);
      el.setAttribute('bg-color', hex(getComputedStyle(card).backgroundColor));
      el.setAttribute('header-color', hex(getComputedStyle(card).backgroundColor));
      el.setAttribute('text-color', hex(getComputedStyle(document.body).color));
      if (link) el.setAttribute('primary-color', hex(getComputedStyle(link).color));
    });
  }
  // A theme change, or a <rapi-doc> arriving with client-side navigation.
  new MutationObserver(paint).observe(document.documentElement, {
    attributes: true, attributeFilter: ['data-theme'], childList: true, subtree: true,
  });
  if (window.matchMedia) {
    window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change', paint);
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', paint);
  else paint();
})();
