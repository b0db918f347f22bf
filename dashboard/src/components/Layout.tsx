// Application shell: navigation, connection indicator, alert banner, drawer.
import { AlertIcon, CloseIcon, InfoIcon } from './icons';
import { useEffect, useState, type ReactNode } from 'react';
import { Link, navigate, useLocation } from '../router';
import { useConfig } from '../state/config';
import { selectTopAlert, useUi } from '../state/ui';
import { Drawer } from './Drawer';

const NAV: [string, string, string][] = [
  ['/rollouts', 'Rollouts', '▤'],
  ['/resources', 'Resources', '◈'],
  ['/traces', 'Traces', '≋'],
  ['/runners', 'Runners', '⚙'],
  ['/settings', 'Settings', '✎'],
];

type Health = 'unknown' | 'online' | 'offline' | 'unauthorized';

function ConnectionIndicator() {
  const { client, config } = useConfig();
  const [health, setHealth] = useState<Health>('unknown');
  const [checking, setChecking] = useState(false);
  useEffect(() => {
    let controller: AbortController | null = null;
    const check = () => {
      controller?.abort();
      const c = new AbortController();
      controller = c;
      setChecking(true);
      // The health route never needs a token: an online server may still refuse every API call (401).
      client
        .health(c.signal)
        .then(async (ok) => (ok ? ((await client.authorized(c.signal)) === false ? 'unauthorized' : 'online') : 'offline'))
        .then(
          (h: Health) => { if (!c.signal.aborted) { setHealth(h); setChecking(false); } },
          () => { if (!c.signal.aborted) setChecking(false); },
        );
    };
    check();
    const id = config.autoRefreshMs > 0 ? window.setInterval(check, config.autoRefreshMs) : undefined;
    return () => { controller?.abort(); if (id) window.clearInterval(id); };
  }, [client, config.autoRefreshMs]);
  const label = checking ? 'Refreshing' : { online: 'Online', offline: 'Offline', unauthorized: 'Unauthorized', unknown: 'Unknown' }[health];
  const color = checking ? 'blue' : { online: 'teal', offline: 'red', unauthorized: 'orange', unknown: 'gray' }[health];
  return (
    <button type="button" className="connection" aria-label="Open settings to edit server connection" onClick={() => navigate('/settings')} data-testid="connection-indicator">
      <div className="small dim">Server connection</div>
      <span className={`badge badge-${color}`} data-testid="connection-status" data-health={health}>{label}</span>
      <div className="small mono ellipsis">{config.baseUrl || 'No server configured'}</div>
      {health === 'unauthorized' && !checking && (
        <div className="small unauthorized-hint" data-testid="connection-unauthorized">
          The store requires an API token: set it in Settings → API token.
        </div>
      )}
    </button>
  );
}

function AlertBanner() {
  const { alerts, dismissAlert } = useUi();
  const top = selectTopAlert(alerts);
  if (!top) return null;
  return (
    <div className={`alert-banner tone-${top.tone}`} role="alert" data-testid="alert-banner" data-alert-id={top.id}>
      <span className="alert-icon">{top.tone === 'info' ? <InfoIcon /> : <AlertIcon />}</span>
      <span className="alert-message">{top.message}</span>
      <button type="button" className="icon-button" aria-label="Close alert" onClick={() => dismissAlert(top.id)}><CloseIcon /></button>
    </div>
  );
}

export function Layout({ children }: { children: ReactNode }) {
  const { pathname } = useLocation();
  const { drawer } = useUi();
  return (
    <div className={drawer ? 'shell with-drawer' : 'shell'}>
      <nav className="navbar" aria-label="Main navigation">
        <div className="brand">
          <span className="logo" aria-hidden="true">⚡</span>
          <span>rollouthub</span>
        </div>
        <ul className="nav-links">
          {NAV.map(([to, label, icon]) => {
            const active = pathname === to || pathname.startsWith(`${to}/`);
            return (
              <li key={to}>
                <Link to={to} className={active ? 'active' : undefined} aria-current={active ? 'page' : undefined}>
                  <span className="nav-icon" aria-hidden="true">{icon}</span>
                  {label}
                </Link>
              </li>
            );
          })}
        </ul>
        <div className="spacer" />
        <ConnectionIndicator />
      </nav>
      <main className="main">{children}</main>
      <AlertBanner />
      <Drawer />
    </div>
  );
}
