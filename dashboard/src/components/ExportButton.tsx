// Download the current selection (status and mode filters) as JSONL through the store's streaming export route.
import { useState } from 'react';
import { getErrorDescriptor } from '../api/client';
import { downloadExport, EXPORT_FORMATS, type ExportFormat } from '../api/training';
import type { RolloutMode, RolloutStatus } from '../api/types';
import { useConfig } from '../state/config';
import { DownloadIcon } from './icons';

const LABELS: Record<ExportFormat, string> = {
  messages: 'Messages (chat SFT)',
  triplets: 'Triplets (RL)',
  preferences: 'Preference pairs',
  rewards: 'Rewards',
};

export function ExportButton({ statusFilters, modeFilters }: { statusFilters: RolloutStatus[]; modeFilters: RolloutMode[] }) {
  const { client } = useConfig();
  const [format, setFormat] = useState<ExportFormat>('messages');
  const [state, setState] = useState<{ busy: boolean; message: string | null; error: boolean }>({ busy: false, message: null, error: false });
  const statuses = statusFilters.length ? statusFilters.join(', ') : 'succeeded, failed';
  const title = `Exports the ${statuses} rollouts${modeFilters.length ? ` in mode ${modeFilters.join(', ')}` : ''} (the status and mode filters; not the search) as JSONL.`;
  const run = async () => {
    setState({ busy: true, message: null, error: false });
    try {
      const rows = await downloadExport(client, format, { statusIn: statusFilters, modeIn: modeFilters });
      setState({ busy: false, message: `Downloaded ${rows} ${rows === 1 ? 'row' : 'rows'}`, error: false });
    } catch (err) {
      setState({ busy: false, message: `Export failed: ${getErrorDescriptor(err) ?? 'unknown error'}`, error: true });
    }
  };
  return (
    <div className="export-control" data-testid="export-control">
      <select className="input" aria-label="Export format" value={format} onChange={(e) => setFormat(e.target.value as ExportFormat)}>
        {EXPORT_FORMATS.map((f) => <option key={f} value={f}>{LABELS[f]}</option>)}
      </select>
      <button type="button" className="button" onClick={run} disabled={state.busy} title={title} aria-label="Export JSONL">
        <DownloadIcon /> {state.busy ? 'Exporting…' : 'Export JSONL'}
      </button>
      {state.message && (
        <span className={`small ${state.error ? 'error-text' : 'dim'}`} role="status" data-testid="export-status">{state.message}</span>
      )}
    </div>
  );
}
