// Global alert banner and drawer.
import { createContext, useCallback, useContext, useMemo, useState, type ReactNode } from 'react';
import type { Attempt, Rollout, Span, Worker } from '../api/types';

export type AlertTone = 'info' | 'warning' | 'error';
export interface AlertEntry {
  id: string;
  message: string;
  tone: AlertTone;
  isVisible: boolean;
  createdAt: number;
}

export type DrawerContent =
  | { type: 'rollout-json'; rollout: Rollout; attempt: Attempt | null; isNested: boolean }
  | { type: 'rollout-traces'; rollout: Rollout; attempt: Attempt | null; isNested: boolean }
  | { type: 'rollout-conversation'; rollout: Rollout; attempt: Attempt | null; isNested: boolean }
  | { type: 'trace-detail'; span: Span; rollout: Rollout | null; attempt: Attempt | null }
  | { type: 'worker-detail'; worker: Worker };

interface UiContextValue {
  alerts: AlertEntry[];
  showAlert: (a: { id: string; message: string; tone?: AlertTone }) => void;
  hideAlert: (id: string) => void;
  dismissAlert: (id: string) => void;
  drawer: DrawerContent | null;
  openDrawer: (content: DrawerContent) => void;
  closeDrawer: () => void;
}

const UiContext = createContext<UiContextValue | null>(null);
let alertCounter = 0;

export function UiProvider({ children }: { children: ReactNode }) {
  const [alerts, setAlerts] = useState<AlertEntry[]>([]);
  const [drawer, setDrawer] = useState<DrawerContent | null>(null);

  const showAlert = useCallback(({ id, message, tone = 'info' }: { id: string; message: string; tone?: AlertTone }) => {
    setAlerts((list) => {
      const existing = list.find((a) => a.id === id);
      if (existing && existing.message === message && existing.tone === tone && existing.isVisible) return list;
      const entry: AlertEntry = { id, message, tone, isVisible: true, createdAt: ++alertCounter };
      return existing ? list.map((a) => (a.id === id ? entry : a)) : [...list, entry];
    });
  }, []);
  const hideAlert = useCallback((id: string) => {
    setAlerts((list) => (list.some((a) => a.id === id) ? list.filter((a) => a.id !== id) : list));
  }, []);
  const dismissAlert = useCallback((id: string) => {
    setAlerts((list) => list.map((a) => (a.id === id ? { ...a, isVisible: false } : a)));
  }, []);

  const value = useMemo<UiContextValue>(
    () => ({ alerts, showAlert, hideAlert, dismissAlert, drawer, openDrawer: setDrawer, closeDrawer: () => setDrawer(null) }),
    [alerts, showAlert, hideAlert, dismissAlert, drawer],
  );
  return <UiContext.Provider value={value}>{children}</UiContext.Provider>;
}

export function useUi(): UiContextValue {
  const v = useContext(UiContext);
  if (!v) throw new Error('useUi outside UiProvider');
  return v;
}

const TONE_RANK: Record<AlertTone, number> = { error: 3, warning: 2, info: 1 };
/** Highest-priority visible alert: error > warning > info, most recent among equals. */
export function selectTopAlert(alerts: AlertEntry[]): AlertEntry | null {
  let best: AlertEntry | null = null;
  for (const a of alerts) {
    if (!a.isVisible) continue;
    if (!best || TONE_RANK[a.tone] > TONE_RANK[best.tone] || (TONE_RANK[a.tone] === TONE_RANK[best.tone] && a.createdAt > best.createdAt)) {
      best = a;
    }
  }
  return best;
}
