// Global configuration plus the API token (stored in localStorage, sent as a bearer token).
import { createContext, useContext, useEffect, useMemo, useState, type ReactNode } from 'react';
import { ApiClient } from '../api/client';

export type Theme = 'system' | 'light' | 'dark';
export const TOKEN_STORAGE_KEY = 'rollouthub.dashboard.apiToken';

export interface Config {
  baseUrl: string;
  autoRefreshMs: number;
  theme: Theme;
  token: string;
}

interface ConfigContextValue {
  config: Config;
  client: ApiClient;
  update: (patch: Partial<Config>) => void;
}

const ConfigContext = createContext<ConfigContextValue | null>(null);

function readToken(): string {
  try {
    return window.localStorage.getItem(TOKEN_STORAGE_KEY) ?? '';
  } catch {
    return '';
  }
}

export function ConfigProvider({ children }: { children: ReactNode }) {
  const [config, setConfig] = useState<Config>(() => ({
    baseUrl: window.location.origin,
    autoRefreshMs: 0,
    theme: 'system',
    token: readToken(),
  }));

  useEffect(() => {
    try {
      if (config.token) window.localStorage.setItem(TOKEN_STORAGE_KEY, config.token);
      else window.localStorage.removeItem(TOKEN_STORAGE_KEY);
    } catch {
      /* storage unavailable */
    }
  }, [config.token]);

  useEffect(() => {
    const root = document.documentElement;
    const apply = () => {
      const dark =
        config.theme === 'dark' ||
        (config.theme === 'system' && window.matchMedia?.('(prefers-color-scheme: dark)').matches);
      root.dataset.theme = dark ? 'dark' : 'light';
    };
    apply();
    const mq = window.matchMedia?.('(prefers-color-scheme: dark)');
    mq?.addEventListener?.('change', apply);
    return () => mq?.removeEventListener?.('change', apply);
  }, [config.theme]);

  const value = useMemo<ConfigContextValue>(
    () => ({
      config,
      client: new ApiClient({ baseUrl: config.baseUrl, token: config.token, origin: window.location.origin }),
      update: (patch) => setConfig((c) => ({ ...c, ...patch })),
    }),
    [config],
  );
  return <ConfigContext.Provider value={value}>{children}</ConfigContext.Provider>;
}

export function useConfig(): ConfigContextValue {
  const v = useContext(ConfigContext);
  if (!v) throw new Error('useConfig outside ConfigProvider');
  return v;
}

/** Polling interval for "live" widgets: the configured auto-refresh, else 5 s. */
export function useLiveInterval(live: boolean): number {
  const { config } = useConfig();
  if (!live) return 0;
  return config.autoRefreshMs > 0 ? config.autoRefreshMs : 5000;
}
