// Settings page: backend base URL and API token (each with a Save button), auto-refresh interval, theme.
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
  const [tokenSaved, setTokenSaved] = useState(false);
  useEffect(() => setBaseUrl(config.baseUrl), [config.baseUrl]);
  useEffect(() => setToken(config.token), [config.token]);
  const saveBaseUrl = () => update({ baseUrl: baseUrl.trim() });
  const saveToken = () => {
    update({ token: token.trim() });
    setTokenSaved(true);
  };
  const baseUrlDirty = baseUrl.trim() !== config.baseUrl;
  const tokenDirty = token.trim() !== config.token;
  return (
    <div className="page settings" data-testid="settings-page">
      <h1>Settings</h1>
      <section>
        <label className="field-label" htmlFor="settings-base-url">Backend base URL</label>
        <div className="dim small">The dashboard uses this address for health checks and API calls.</div>
        <div className="row">
          <input id="settings-base-url" className="input grow" data-testid="settings-base-url" placeholder="http://127.0.0.1:4747"
            value={baseUrl} onChange={(e) => setBaseUrl(e.target.value)} onBlur={saveBaseUrl}
            onKeyDown={(e) => { if (e.key === 'Enter') saveBaseUrl(); }} />
          <button type="button" className="button" data-testid="settings-base-url-save" disabled={!baseUrlDirty} onClick={saveBaseUrl}>Save</button>
        </div>
      </section>
      <hr />
      <section>
        <label className="field-label" htmlFor="settings-api-token">API token</label>
        <div className="dim small">
          Sent as <code>Authorization: Bearer &lt;token&gt;</code> when the store runs with <code>--api-token</code>. Stored in this browser only (localStorage).
        </div>
        <div className="row">
          <input id="settings-api-token" className="input grow" data-testid="settings-api-token" type={showToken ? 'text' : 'password'}
            autoComplete="off" placeholder="No token" value={token} onChange={(e) => { setToken(e.target.value); setTokenSaved(false); }}
            onBlur={() => { if (tokenDirty) saveToken(); }} onKeyDown={(e) => { if (e.key === 'Enter') saveToken(); }} />
          <button type="button" className="button" data-testid="settings-api-token-save" disabled={!tokenDirty} onClick={saveToken}>Save</button>
          <button type="button" className="button subtle" onClick={() => setShowToken((s) => !s)}>{showToken ? 'Hide' : 'Show'}</button>
          <button type="button" className="button subtle" onClick={() => { setToken(''); update({ token: '' }); setTokenSaved(true); }}>Clear</button>
        </div>
        <div className="small" role="status" data-testid="settings-api-token-status">
          {tokenDirty ? (
            <span className="save-status unsaved">Not saved yet: press Save (or Enter).</span>
          ) : tokenSaved ? (
            <span className="save-status">{config.token ? 'Saved: sent with every request from now on.' : 'Cleared: requests go without a token.'}</span>
          ) : null}
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
