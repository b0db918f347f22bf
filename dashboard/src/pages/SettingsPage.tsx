// Settings page (dashboard.md 10) plus the API token field.
import { useEffect, useState } from 'react';
import { useConfig, type Theme } from '../state/config';

const REFRESH_OPTIONS: [number, string][] = [
  [0, 'Off'],
  [5000, 'Every 5 seconds'],
  [15000, 'Every 15 seconds'],
  [60000, 'Every 60 seconds'],
  [300000, 'Every 5 minutes'],
];

export function SettingsPage() {
  const { config, update } = useConfig();
  const [baseUrl, setBaseUrl] = useState(config.baseUrl);
  const [token, setToken] = useState(config.token);
  const [showToken, setShowToken] = useState(false);
  useEffect(() => setBaseUrl(config.baseUrl), [config.baseUrl]);
  useEffect(() => setToken(config.token), [config.token]);
  return (
    <div className="page settings" data-testid="settings-page">
      <h1>Settings</h1>
      <section>
        <label className="field-label" htmlFor="settings-base-url">Backend base URL</label>
        <div className="dim small">The dashboard uses this address for health checks and API calls.</div>
        <input id="settings-base-url" className="input" data-testid="settings-base-url" placeholder="http://localhost:8000"
          value={baseUrl} onChange={(e) => setBaseUrl(e.target.value)} onBlur={() => update({ baseUrl: baseUrl.trim() })} />
      </section>
      <hr />
      <section>
        <label className="field-label" htmlFor="settings-api-token">API token</label>
        <div className="dim small">
          Sent as <code>Authorization: Bearer &lt;token&gt;</code> when the store runs with <code>--api-token</code>. Stored in this browser only (localStorage).
        </div>
        <div className="row">
          <input id="settings-api-token" className="input" data-testid="settings-api-token" type={showToken ? 'text' : 'password'}
            autoComplete="off" placeholder="No token" value={token} onChange={(e) => setToken(e.target.value)}
            onBlur={() => update({ token: token.trim() })} onKeyDown={(e) => { if (e.key === 'Enter') update({ token: token.trim() }); }} />
          <button type="button" className="button subtle" onClick={() => setShowToken((s) => !s)}>{showToken ? 'Hide' : 'Show'}</button>
          <button type="button" className="button subtle" onClick={() => { setToken(''); update({ token: '' }); }}>Clear</button>
        </div>
      </section>
      <hr />
      <section>
        <label className="field-label" htmlFor="settings-auto-refresh">Auto-refresh interval</label>
        <div className="dim small">Controls how often the dashboard polls the server.</div>
        <select id="settings-auto-refresh" className="input" data-testid="settings-auto-refresh" value={String(config.autoRefreshMs)}
          onChange={(e) => update({ autoRefreshMs: Number(e.target.value) || 0 })}>
          {REFRESH_OPTIONS.map(([v, l]) => <option key={v} value={v}>{l}</option>)}
        </select>
      </section>
      <hr />
      <section>
        <label className="field-label" htmlFor="settings-theme">Theme</label>
        <div className="dim small">Choose the color scheme for the dashboard.</div>
        <select id="settings-theme" className="input" data-testid="settings-theme" value={config.theme}
          onChange={(e) => update({ theme: e.target.value as Theme })}>
          <option value="system">System default</option>
          <option value="light">Light</option>
          <option value="dark">Dark</option>
        </select>
      </section>
    </div>
  );
}
