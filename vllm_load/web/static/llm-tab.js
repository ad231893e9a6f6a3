/* The charts in the "LLM" and "LLM by persona" tabs of Locust's own UI.
 *
 * Locust's extended tabs (template_args["extended_tabs"]) render a table of the extended stats
 * and nothing else, so each tab's table is Locust's, and this script, which the master adds to
 * Locust's page, puts vllm-load's charts above it while that tab is the one selected: after the
 * bar of tabs (MUI's [role=tablist]), before the tab's table. The LLM tab gets the charts of the
 * whole test, the persona tab one line per persona (user class). The charts follow Locust's
 * light/dark switch (they read the page's background colour).
 *
 * Locust's tables take their columns when its page is loaded (template_args): where the server's
 * columns have grown since (a reasoning model's TTFAT, once a level has had reasoning), a note
 * names the new ones and asks for a reload.
 */
(function () {
  'use strict';
  // tab title -> the mount's id and what create() draws there
  const TABS = {
    'LLM': { id: 'vllm-load-charts', options: {} },
    'LLM by persona': { id: 'vllm-load-persona-charts', options: { only: 'personas' } },
  };
  let mount = null, charts = null, dark = null, shown = null;

  function selectedTab() {
    const tab = document.querySelector('[role=tab][aria-selected=true]');
    return tab ? tab.textContent.trim() : null;
  }
  function unmount() {
    if (charts) charts.stop();
    if (mount) mount.remove();
    mount = charts = shown = null;
  }
  function check() {
    const title = selectedTab();
    const wanted = Object.prototype.hasOwnProperty.call(TABS, title) ? title : null;
    if (wanted && !(shown === wanted && mount && mount.isConnected)) {
      const tabs = document.querySelector('[role=tablist]');
      const bar = tabs && tabs.closest('.MuiTabs-root');
      if (!bar || !bar.parentElement) return;
      unmount();
      mount = document.createElement('div');
      mount.id = TABS[wanted].id;
      const note = document.createElement('p');
      note.className = 'vl-note';
      note.innerHTML = 'Live figures of the last seconds (warm-up included): tokens as they stream in, '
        + 'latencies and failures of the requests that finished; '
        + 'the report\u2019s measured windows are the ones to publish. <a href="./llm" style="color:inherit">Open the LLM view</a>';
      mount.appendChild(note);
      // the current level's verdict (from the server's /metrics so far), as text
      const verdict = document.createElement('p');
      verdict.className = 'vl-note vl-verdict';
      verdict.hidden = true;
      mount.appendChild(verdict);
      const stale = document.createElement('p');
      stale.className = 'vl-note vl-stale';
      stale.hidden = true;
      mount.appendChild(stale);
      const loaded = ((window.templateArgs || {}).extended_tables || []).find(t => t.key === 'llm');
      const have = new Set(loaded ? loaded.structure.map(c => c.key) : []);
      const onData = data => {
        const v = data.verdict;
        verdict.hidden = !v;
        verdict.textContent = v ? 'Level ' + v.level + ' is limited by: ' + v.kind + ' (' + v.reason + ')' : '';
        const added = loaded && data.columns ? data.columns.levels.filter(c => !have.has(c[0])).map(c => c[1]) : [];
        stale.hidden = !added.length;
        stale.textContent = added.length ? 'New columns since this page was loaded: ' + added.join(', ') + '. Reload the page to see them in the table.' : '';
      };
      bar.parentElement.after(mount);
      charts = window.VllmLoadCharts.create(mount, { statsUrl: './llm/stats', onData, ...TABS[wanted].options });
      charts.start();
      shown = wanted;
    } else if (!wanted && mount) {
      unmount();
    }
    if (charts) {
      const now = window.VllmLoadCharts.isDark();
      if (dark !== null && now !== dark) charts.redraw();
      dark = now;
    }
  }
  setInterval(check, 250);
})();
