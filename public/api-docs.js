// The API reference (/docs/api): loads RapiDoc from /vendor/ (never a CDN) once, and keeps
// every <rapi-doc> in the portal's colours and theme, light or dark, as the theme changes.
(function () {
  let loading = null;
  function load() {
    if (window.customElements && customElements.get('rapi-doc')) return;
    if (loading) return;
    loading = document.createElement('script');
    loading.type = 'module';
    loading.src = '/vendor/rapidoc-min.js';
    document.head.appendChild(loading);
  }
  function dark() {
    const t = document.documentElement.getAttribute('data-theme');
    if (t === 'dark') return true;
    if (t === 'light') return false;
    return !!(window.matchMedia && window.matchMedia('(prefers-color-scheme: dark)').matches);
  }
  // The portal's colours are CSS variables with light-dark(); a probe resolves them.
  function colour(variable, property) {
    const probe = document.createElement('span');
    probe.style.setProperty(property, 'var(' + variable + ')');
    probe.style.display = 'none';
    document.body.appendChild(probe);
    const value = getComputedStyle(probe).getPropertyValue(property);
    probe.remove();
    return value;
  }
  function style(el) {
    el.setAttribute('theme', dark() ? 'dark' : 'light');
    el.setAttribute('bg-color', colour('--surface', 'background-color'));
    el.setAttribute('text-color', colour('--text', 'color'));
    el.setAttribute('primary-color', colour('--accent', 'color'));
    el.setAttribute('header-color', colour('--surface', 'background-color'));
  }
  function all() {
    const docs = document.querySelectorAll('rapi-doc');
    if (docs.length) load();
    docs.forEach(style);
  }
  new MutationObserver(all).observe(document.documentElement, {
    attributes: true, attributeFilter: ['data-theme'], childList: true, subtree: true,
  });
  if (window.matchMedia) {
    window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change', all);
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', all);
  else all();
})();
