// Draws every `.chart[data-option]` with ECharts, loaded from /vendor/ (never a CDN) the
// first time a page has a chart. Charts that arrive later (client-side navigation) are
// drawn too; theme and size changes redraw them.
(function () {
  let loading = null;
  function echartsReady() {
    if (window.echarts) return Promise.resolve(window.echarts);
    if (!loading) {
      loading = new Promise(function (resolve, reject) {
        const s = document.createElement('script');
        s.src = '/vendor/echarts.min.js';
        s.onload = function () { resolve(window.echarts); };
        s.onerror = reject;
        document.head.appendChild(s);
      });
    }
    return loading;
  }
  function theme() {
    const t = document.documentElement.getAttribute('data-theme');
    if (t === 'dark') return 'dark';
    if (t === 'light') return null;
    return window.matchMedia && window.matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : null;
  }
  function draw(el, force) {
    if (el.dataset.drawn === '1' && !force) return;
    let option;
    try { option = JSON.parse(el.dataset.option); } catch (e) { return; }
    echartsReady().then(function (echarts) {
      const old = echarts.getInstanceByDom(el);
      if (old) old.dispose();
      option.backgroundColor = 'transparent';
      echarts.init(el, theme()).setOption(option);
      el.dataset.drawn = '1';
    });
  }
  function drawAll(force) {
    document.querySelectorAll('.chart[data-option]').forEach(function (el) { draw(el, force); });
  }
  function start() {
    drawAll(false);
    new MutationObserver(function (changes) {
      let themeChanged = false;
      for (const c of changes) {
        if (c.type === 'attributes' && c.attributeName === 'data-theme') themeChanged = true;
      }
      drawAll(themeChanged);
    }).observe(document.documentElement, { childList: true, subtree: true, attributes: true, attributeFilter: ['data-theme', 'data-option'] });
    window.addEventListener('resize', function () {
      if (!window.echarts) return;
      document.querySelectorAll('.chart[data-option]').forEach(function (el) {
        const c = window.echarts.getInstanceByDom(el);
        if (c) c.resize();
      });
    });
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
