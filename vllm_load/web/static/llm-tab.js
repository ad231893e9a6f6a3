/* The charts in the "LLM" tab of Locust's own UI.
 *
 * Locust's extended tabs (template_args["extended_tabs"]) render a table of the extended stats
 * and nothing else, so the LLM tab's per-level table is Locust's, and this script, which the
 * master adds to Locust's page, puts vllm-load's charts above it while the LLM tab is the one
 * selected: after the bar of tabs (MUI's [role=tablist]), before the tab's table. The charts
 * follow Locust's light/dark switch (they read the page's background colour).
 */
(function () {
  'use strict';
  const TAB_TITLE = 'LLM';
  let mount = null, charts = null, dark = null;

  function selectedTab() {
    const tab = document.querySelector('[role=tab][aria-selected=true]');
    return tab ? tab.textContent.trim() : null;
  }
  function check() {
    const wanted = selectedTab() === TAB_TITLE;
    if (wanted && !(mount && mount.isConnected)) {
      const tabs = document.querySelector('[role=tablist]');
      const bar = tabs && tabs.closest('.MuiTabs-root');
      if (!bar || !bar.parentElement) return;
      if (charts) charts.stop();
      mount = document.createElement('div');
      mount.id = 'vllm-load-charts';
      const note = document.createElement('p');
      note.className = 'vl-note';
      note.innerHTML = 'Live figures of the requests finished in the last seconds (warm-up included); '
        + 'the report\u2019s measured windows are the ones to publish. <a href="./llm" style="color:inherit">Open the LLM view</a>';
      mount.appendChild(note);
      bar.parentElement.after(mount);
      charts = window.VllmLoadCharts.create(mount, { statsUrl: './llm/stats' });
      charts.start();
    } else if (!wanted && mount) {
      charts.stop();
      mount.remove();
      mount = charts = null;
    }
    if (charts) {
      const now = window.VllmLoadCharts.isDark();
      if (dark !== null && now !== dark) charts.redraw();
      dark = now;
    }
  }
  setInterval(check, 250);
})();
